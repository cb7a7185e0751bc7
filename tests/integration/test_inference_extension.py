"""The sidecar in front of the Gateway API Inference Extension's endpoint picker (EPP), in
real Envoy: two ext_proc filters chained from the one Envoy, ours first, then a stand-in
EPP that picks the endpoint (the x-gateway-destination-endpoint header, which an
ORIGINAL_DST cluster routes by) and records what it saw. Shed requests never reach it;
admitted ones arrive naming their tier's InferenceObjective and their tenant as the
fairness id (whatever a client put there), and go to the endpoint it picked."""

from __future__ import annotations

import asyncio
import copy

import aiohttp
import pytest
import pytest_asyncio

from sidecar.config.schema import InferenceExtensionConfig
from sidecar.ports import free_port
from sidecar.request.policy.scheduling import (
    CLIENT_MAY_NOT_SEND,
    DESTINATION_HEADER,
    FAIRNESS_HEADER,
    OBJECTIVE_HEADER,
)
from sidecar.tooling.stack import envoy_config
from sidecar.tooling.stack.stack import start_envoy
from tests.integration.helpers import stack_with_tenants
from tests.integration.stand_in_picker import generated, running_picker

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

PAY_KEY, BATCH_KEY = "gaie-pay-p0", "gaie-batch-p2"
OBJECTIVES = {"p0": "checkout-critical", "p1": "core", "p2": "batch-sheddable"}
EPP_FILTER = "gaie.endpoint_picker"
EXT_PROC = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"


def chained(config: dict, epp_port: int) -> dict:
    """The stack's Envoy with the picker's ext_proc after the sidecar's, and the engines'
    cluster routing to the endpoint the picker names, as Inference Extension gateways do."""
    config = copy.deepcopy(config)
    manager = envoy_config.connection_manager(config)
    filters = manager["http_filters"]
    ours = next(i for i, f in enumerate(filters) if f["name"] == "envoy.filters.http.ext_proc")
    filters.insert(
        ours + 1,
        {
            "name": EPP_FILTER,
            "typed_config": {
                "@type": EXT_PROC,
                "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}},
                "failure_mode_allow": False,
                "processing_mode": {
                    "request_header_mode": "SEND",
                    "response_header_mode": "SKIP",
                    "request_body_mode": "NONE",
                    "response_body_mode": "NONE",
                },
            },
        },
    )
    clusters = config["static_resources"]["clusters"]
    sidecar = next(c for c in clusters if c["name"] == "qos_sidecar")
    epp = copy.deepcopy(sidecar)
    epp["name"] = epp["load_assignment"]["cluster_name"] = "epp"
    address = {"address": "127.0.0.1", "port_value": epp_port}
    epp["load_assignment"]["endpoints"] = [
        {"lb_endpoints": [{"endpoint": {"address": {"socket_address": address}}}]}
    ]
    clusters.append(epp)
    engines = next(c for c in clusters if c["name"] == "vllm")
    engines.pop("load_assignment")
    engines.pop("health_checks", None)
    engines.update(
        type="ORIGINAL_DST",
        lb_policy="CLUSTER_PROVIDED",
        original_dst_lb_config={"use_http_header": True, "http_header_name": DESTINATION_HEADER},
    )
    return config


@pytest_asyncio.fixture
async def picked(tmp_path):
    tenants = {"pay": ("p0", PAY_KEY), "reports": ("p2", BATCH_KEY)}
    with stack_with_tenants(tmp_path, tenants, replicas=2) as stack:
        extension = {"enabled": True, "objectives": OBJECTIVES}
        InferenceExtensionConfig.model_validate(extension)
        stack.config.set({"inference_extension": extension})
        engine = stack.engine_urls[1].removeprefix("http://")
        async with running_picker(engine) as (picker, epp_port):
            port, admin_port = free_port(), free_port()
            config = chained(stack.envoy_config(port, admin_port), epp_port)
            envoy = start_envoy(config, tmp_path, admin_port, "envoy-gaie", 1, stack.envoy_env)
            try:
                yield stack, picker, f"http://127.0.0.1:{port}"
            finally:
                envoy.stop()


async def post(session, url: str, key: str, **headers: str):
    body = {"model": "mock-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with session.post(
        f"{url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {key}", **headers},
    ) as answer:
        return answer.status, answer.headers.get("x-qos-decision"), await answer.json()


@pytest.mark.timeout(120)
async def test_sheds_stay_out_and_admitted_requests_carry_their_objective_and_tenant(picked):
    stack, picker, url = picked
    before = [generated(engine) for engine in stack.engine_urls]
    stack.config.mode("core-only")
    spoof = {OBJECTIVE_HEADER: "checkout-critical", FAIRNESS_HEADER: "pay"}
    async with aiohttp.ClientSession() as session:
        shed = await post(session, url, BATCH_KEY, **spoof)
        assert shed[1] == "shed_core_only" and not picker.seen
        answers = await asyncio.gather(*(post(session, url, PAY_KEY) for _ in range(4)))
    assert [status for status, _, _ in answers] == [200] * 4
    assert len(picker.seen) == 4  # the admitted ones, and only those
    for headers in picker.seen:
        assert headers[OBJECTIVE_HEADER] == OBJECTIVES["p0"]
        assert headers[FAIRNESS_HEADER] == "pay"
        assert headers["x-qos-tier"] == "p0"
    # Every one went where the picker sent it: the second engine decoded them all.
    after = [generated(engine) for engine in stack.engine_urls]
    assert after[0] == before[0] and after[1] == before[1] + 4 * 4


@pytest.mark.timeout(120)
async def test_a_client_cannot_name_its_own_objective_or_fairness_id(picked):
    _, picker, url = picked
    # Every name a picker reads, the model it would rewrite to among them.
    spoof = dict.fromkeys(CLIENT_MAY_NOT_SEND, "x") | {OBJECTIVE_HEADER: OBJECTIVES["p0"]}
    async with aiohttp.ClientSession() as session:
        status, _, _ = await post(session, url, BATCH_KEY, **spoof)
    assert status == 200
    (seen,) = picker.seen
    assert seen[OBJECTIVE_HEADER] == OBJECTIVES["p2"] and seen[FAIRNESS_HEADER] == "reports"
    ours = {OBJECTIVE_HEADER, FAIRNESS_HEADER}
    assert not (set(CLIENT_MAY_NOT_SEND) - ours) & set(seen)
