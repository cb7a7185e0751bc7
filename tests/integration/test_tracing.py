"""Traces through real Envoy: with OTEL_EXPORTER_OTLP_ENDPOINT pointing at an OTLP/HTTP
receiver (decoded with the OpenTelemetry protos), a request sent with a W3C traceparent
yields a qos.decision span in that trace, child of the client's span, with the decision's
attributes and an event per stage, and the request reaches the engine with a traceparent
of the same trace naming that span. With no endpoint set nothing is traced and the
client's traceparent reaches the engine as it was sent."""

from __future__ import annotations

import copy

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from sidecar.ports import free_port
from sidecar.tooling.stack.stack import start_envoy
from tests.integration.helpers import stack_with_tenants, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY = "trace-p1"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
ANSWER = {
    "id": "chatcmpl-t",
    "object": "chat.completion",
    "created": 0,
    "model": "mock-llm",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}


class Receiver:
    """An OTLP/HTTP trace receiver, and an engine that keeps the headers it was sent."""

    def __init__(self) -> None:
        self.spans: list = []
        self.upstream_headers: list[dict[str, str]] = []

    async def traces(self, request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest.FromString(await request.read())
        for resource in export.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                self.spans += [(service, span) for span in scope.spans]
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def chat(self, request: web.Request) -> web.Response:
        self.upstream_headers.append({k.lower(): v for k, v in request.headers.items()})
        return web.json_response(ANSWER)


@pytest_asyncio.fixture
async def receiver():
    found = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", found.traces)
    app.router.add_post("/v1/chat/completions", found.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield found, port
    await runner.cleanup()


def to_recorder(config: dict, port: int) -> dict:
    """The stack's Envoy sending admitted requests to the recording engine."""
    config = copy.deepcopy(config)
    (cluster,) = [c for c in config["static_resources"]["clusters"] if c["name"] == "vllm"]
    address = {"socket_address": {"address": "127.0.0.1", "port_value": port}}
    cluster["load_assignment"]["endpoints"] = [
        {"lb_endpoints": [{"endpoint": {"address": address}}]}
    ]
    cluster.pop("health_checks", None)
    return config


async def traced_request(tmp_path, receiver_port: int, environment: dict[str, str]) -> None:
    env = tuple(environment.items())
    with stack_with_tenants(tmp_path, {"t": ("p1", KEY)}, sidecar_env=env) as stack:
        port, admin_port = free_port(), free_port()
        config = to_recorder(stack.envoy_config(port, admin_port), receiver_port)
        envoy = start_envoy(
            config,
            tmp_path,
            admin_port,
            name="envoy-traced",
            concurrency=1,
            env=stack.envoy_env,
        )
        try:
            body = {"model": "mock-llm", "messages": [{"role": "user", "content": "hi"}]}
            headers = {"authorization": f"Bearer {KEY}", "traceparent": TRACEPARENT}
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions", json=body, headers=headers
                ) as answer,
            ):
                assert answer.status == 200, await answer.text()
        finally:
            envoy.stop()


@pytest.mark.timeout(120)
async def test_a_decision_is_a_span_of_the_client_s_trace_and_the_engine_s_parent(
    tmp_path, receiver
):
    found, port = receiver
    environment = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_SERVICE_NAME": "gateway-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    await traced_request(tmp_path, port, environment)
    await wait_until(lambda: bool(found.spans), 10, "the decision's span exported")
    ((service, span),) = found.spans
    assert service["service.name"] == "gateway-under-test"
    assert span.name == "qos.decision"
    assert span.trace_id.hex() == TRACE_ID and span.parent_span_id.hex() == CLIENT_SPAN
    attributes = {a.key: a.value for a in span.attributes}
    assert attributes["qos.tier"].string_value == "p1"
    assert attributes["qos.tenant"].string_value == "t"
    assert attributes["qos.outcome"].string_value == "admit"
    assert attributes["qos.reason"].string_value == "admitted"
    assert attributes["qos.route"].string_value == "chat"
    assert attributes["qos.pool"].string_value == "default"
    assert attributes["qos.cost_tokens"].double_value > 0
    assert [event.name for event in span.events] == [
        "identified", "priced", "load checked", "budget taken", "slot taken",
    ]  # fmt: skip
    (upstream,) = found.upstream_headers
    _, trace_id, parent, _ = upstream["traceparent"].split("-")
    assert (trace_id, parent) == (TRACE_ID, span.span_id.hex())


@pytest.mark.timeout(120)
async def test_without_an_endpoint_nothing_is_traced_and_the_context_passes(tmp_path, receiver):
    found, port = receiver
    await traced_request(tmp_path, port, {"OTEL_SERVICE_NAME": "gateway-under-test"})
    (upstream,) = found.upstream_headers
    assert upstream["traceparent"] == TRACEPARENT
    # The sidecar has stopped (a tracing one sends what it batched as it stops): none came.
    assert found.spans == []
