"""The Inference Extension variants behind their gateways, in real Envoy configured as
each gateway configures its proxies from the variant's resources: Envoy Gateway
(envoy_gateway.py) and Istio (istio_gateway.py). The sidecar is called first on the
route (its message timeout, failure mode, metadata), exchange ends reach its access-log
sink, the proxies' client certificate stands for Envoy's token; then a stand-in endpoint
picker and the model servers it picks. A request held in the queue is decided, not passed
on; with the sidecars away nothing reaches the picker; a client names neither its
objective nor its fairness id under any name."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
import pytest_asyncio
import yaml

from sidecar.ports import free_port
from sidecar.request.policy.scheduling import (
    CLIENT_MAY_NOT_SEND,
    FAIRNESS_HEADER,
    GATEWAY_OBJECTIVE_HEADER,
    OBJECTIVE_HEADER,
)
from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.stack import start_envoy
from tests.integration import envoy_gateway, istio_gateway
from tests.integration.envoy_gateway import Here
from tests.integration.helpers import (
    KUSTOMIZATION,
    built,
    named,
    normalised,
    stack_with_tenants,
    wait_until,
)
from tests.integration.stand_in_picker import generated, running_picker

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p0": "eg-pay", "p1": "eg-core", "p2": "eg-batch"}
TENANTS = {"pay": ("p0", KEYS["p0"]), "core": ("p1", KEYS["p1"]), "reports": ("p2", KEYS["p2"])}
# Each variant, and how its gateway makes its proxies' configuration.
VARIANTS = {
    "envoy-gateway": (built(KUSTOMIZATION / "inference-extension"), envoy_gateway.proxy_config),
    "istio": (built(KUSTOMIZATION / "inference-extension" / "istio"), istio_gateway.proxy_config),
}
SOME_VARIANT = VARIANTS["istio"][0]
PROXY_NAME = next(
    e["value"]
    for d in SOME_VARIANT
    if d["kind"] == "Deployment"
    for c in d["spec"]["template"]["spec"]["containers"]
    for e in c.get("env", [])
    if e["name"] == "QOS_ENVOY_CLIENT_NAME"
)
SHIPPED = yaml.safe_load(named(SOME_VARIANT, "ConfigMap", "qos-config")["data"]["qos.yaml"])
OBJECTIVES = SHIPPED["inference_extension"]["objectives"]


class Gateway:
    def __init__(self, variant: str, stack, picker, url: str) -> None:
        self.variant, self.stack, self.picker, self.url = variant, stack, picker, url

    def configure(self, **more: object) -> None:
        """The shipped configuration (the picker's objectives), and `more`."""
        self.stack.config.set({"inference_extension": SHIPPED["inference_extension"], **more})

    async def chat(
        self, session, tier: str, tokens: int = 4, stream: bool = False, url: str = "", **headers
    ):
        body = {
            "model": "mock-llm",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": tokens,
            "ignore_eos": True,
            "stream": stream,
        }
        return session.post(
            f"{url or self.url}/v1/chat/completions",
            json=body,
            headers={"authorization": f"Bearer {KEYS[tier]}", **headers},
        )


def proxies(variant: str, stack, tmp_path, picker_port: int, proxy_tls) -> tuple[str, object]:
    documents, proxy_config = VARIANTS[variant]
    port, admin_port = free_port(), free_port()
    here = Here(port, admin_port, stack.options.grpc_port, picker_port, proxy_tls, stack.pki.ca)
    # No token in its environment: the proxies have none to send.
    envoy = start_envoy(proxy_config(documents, here), tmp_path, admin_port, variant, 1, {})
    return f"http://127.0.0.1:{port}", envoy


@pytest_asyncio.fixture(params=list(VARIANTS))
async def gateway(request, tmp_path):
    with stack_with_tenants(
        tmp_path, TENANTS, replicas=2, tls=True, tls_client_name=PROXY_NAME, time_scale=0.2
    ) as stack:
        async with running_picker(stack.engine_urls[1].removeprefix("http://")) as (picker, port):
            url, envoy = proxies(request.param, stack, tmp_path, port, stack.pki.client)
            try:
                gateway = Gateway(request.param, stack, picker, url)
                gateway.configure()
                yield gateway
            finally:
                envoy.stop()


def waiting(stack) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return sum(v for k, v in samples.items() if k.startswith("qos_queue_waiting{"))


def in_flight(stack) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return sum(v for k, v in samples.items() if k.startswith("qos_requests_in_flight{"))


@pytest.mark.timeout(120)
async def test_a_request_held_three_seconds_is_decided_then_reaches_the_picker(gateway):
    gateway.configure(fleet={"max_concurrency": 1})
    async with aiohttp.ClientSession() as session:
        async with await gateway.chat(session, "p1", tokens=2000, stream=True) as first:
            assert first.status == 200
            await first.content.readline()
            held_since = time.monotonic()
            second = asyncio.create_task(_answered(gateway.chat(session, "p1")))
            await wait_until(lambda: waiting(gateway.stack) == 1, what="the second waiting")
            # The hold this test is about: the first keeps the only slot 3 s.
            await asyncio.sleep(3 - (time.monotonic() - held_since))
            assert not second.done()
        # The first left: its access-log entry gives its slot back, the second goes on.
        status, headers, answer = await second
    assert status == 200, answer
    assert answer["usage"]["completion_tokens"] == 4
    assert int(headers["x-mock-saw-x-qos-queue-wait-ms"]) >= 2900
    assert [seen[OBJECTIVE_HEADER] for seen in gateway.picker.seen] == [OBJECTIVES["p1"]] * 2
    await wait_until(lambda: in_flight(gateway.stack) == 0, what="both slots given back")


async def _answered(request) -> tuple[int, dict, dict]:
    async with await request as answer:
        return answer.status, dict(answer.headers), await answer.json(content_type=None)


@pytest.mark.timeout(120)
async def test_with_the_sidecars_away_in_core_only_nothing_reaches_the_picker(gateway):
    stack = gateway.stack
    stack.config.mode("core-only")
    async with aiohttp.ClientSession() as session:
        # Up: P0 served, P2 shed by the sidecar; the picker sees the P0 alone.
        status, _, _ = await _answered(gateway.chat(session, "p0"))
        _, headers, _ = await _answered(gateway.chat(session, "p2"))  # its fallback
        assert status == 200 and headers["x-qos-decision"] == "shed_core_only"
        assert len(gateway.picker.seen) == 1
        before = [generated(url) for url in stack.engine_urls]
        stack.process("sidecar").stop()
        answers = [await _answered(gateway.chat(session, tier)) for tier in ("p2", "p1", "p0")]
    # Refused by the proxies themselves: nothing undecided goes on.
    assert [status for status, _, _ in answers] == [503, 503, 503]
    assert len(gateway.picker.seen) == 1
    assert [generated(url) for url in stack.engine_urls] == before


@pytest.mark.timeout(120)
async def test_a_client_names_neither_its_objective_nor_its_fairness_id(gateway):
    spoof = dict.fromkeys(CLIENT_MAY_NOT_SEND, "x") | {
        OBJECTIVE_HEADER: OBJECTIVES["p0"],
        GATEWAY_OBJECTIVE_HEADER: OBJECTIVES["p0"],
    }
    async with aiohttp.ClientSession() as session:
        status, _, answer = await _answered(gateway.chat(session, "p2", **spoof))
    assert status == 200, answer
    (seen,) = gateway.picker.seen
    assert seen[OBJECTIVE_HEADER] == OBJECTIVES["p2"] and seen[FAIRNESS_HEADER] == "reports"
    assert not (set(CLIENT_MAY_NOT_SEND) - {OBJECTIVE_HEADER, FAIRNESS_HEADER}) & set(seen)
    # The exchange's end reached the sidecar: its slot is back.
    await wait_until(lambda: in_flight(gateway.stack) == 0, what="the slot given back")


@pytest.mark.timeout(120)
async def test_a_stream_reaches_its_client_as_the_engine_sends_it(gateway):
    """Envoy Gateway's proxies have no filter to take out usage the client did not ask
    for: the sidecar asks for none there. Istio's have ours: it asks, and takes it out."""
    sent = {
        "model": "mock-llm",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 40,
        "ignore_eos": True,
        "stream": True,
    }
    async with aiohttp.ClientSession() as session:
        headers = {"authorization": f"Bearer {KEYS['p1']}"}
        async with session.post(
            f"{gateway.url}/v1/chat/completions", json=sent, headers=headers
        ) as answer:
            through = await answer.read()
        engine = gateway.stack.engine_urls[1]
        async with session.post(f"{engine}/v1/chat/completions", json=sent) as answer:
            direct = await answer.read()
    assert b'"usage"' not in through
    assert normalised(through) == normalised(direct)


@pytest.mark.timeout(120)
async def test_proxies_whose_certificate_names_another_are_refused(gateway, tmp_path):
    """The sidecar's own certificate is from the same CA, but does not name the proxies."""
    stack = gateway.stack
    (tmp_path / "other").mkdir()
    url, envoy = proxies(gateway.variant, stack, tmp_path / "other", free_port(), stack.pki.server)
    try:
        async with aiohttp.ClientSession() as session:
            status, _, answer = await _answered(gateway.chat(session, "p0", url=url))
    finally:
        envoy.stop()
    assert status == 503, answer
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    assert samples['qos_grpc_calls_refused_total{reason="missing",service="ext_proc"}'] >= 1
    assert not gateway.picker.seen
