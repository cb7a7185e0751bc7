"""When tracing is on (the standard variables only), and what a decision's span carries."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sidecar.refusals import Reason
from sidecar.request.extproc import tracing
from sidecar.request.extproc.otel import OtelTracing
from sidecar.request.policy.decision import Admission, Admit, RequestView, Respond

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_tracing_is_off_unless_an_endpoint_is_given():
    assert isinstance(tracing.from_environment({}), tracing.NoTracing)
    assert isinstance(tracing.from_environment({"OTEL_SERVICE_NAME": "x"}), tracing.NoTracing)
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert tracing.enabled(endpoint)
    assert not tracing.enabled({**endpoint, "OTEL_SDK_DISABLED": "true"})
    assert tracing.enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})


def traced() -> tuple[OtelTracing, InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    return OtelTracing(provider), exported


def test_an_admission_continues_the_client_s_trace_and_is_the_engine_s_parent():
    tracer, exported = traced()
    view = RequestView("POST", "/v1/chat/completions", {"traceparent": PARENT}, b"{}")
    admit = Admit(record=Admission(tier="p0", tenant="pay", pool="default", route="chat", cost=5))
    with tracer.span(view) as span:
        tracing.span_event("priced", None)
        decision = span.finish(admit, 0.002)
    (finished,) = exported.get_finished_spans()
    assert f"{finished.context.trace_id:032x}" == PARENT.split("-")[1]
    assert f"{finished.parent.span_id:016x}" == PARENT.split("-")[2]
    assert (
        finished.attributes["qos.tenant"] == "pay" and finished.attributes["qos.cost_tokens"] == 5
    )
    assert [event.name for event in finished.events] == ["priced"]
    sent = decision.upstream.set_headers["traceparent"]
    assert sent.split("-")[1:3] == [PARENT.split("-")[1], f"{finished.context.span_id:016x}"]


def test_a_refusal_records_its_status_and_sends_nothing_upstream():
    tracer, exported = traced()
    refused = Respond(429, b"{}", Reason.SHED_TIER_BUDGET, tier="p2")
    with tracer.span(RequestView("POST", "/v1/completions", {}, b"{}")) as span:
        assert span.finish(refused, 0.001) is refused
    (finished,) = exported.get_finished_spans()
    assert finished.attributes["http.response.status_code"] == 429
    assert finished.attributes["qos.reason"] == "shed_tier_budget"
    assert finished.parent is None  # no client context: a trace of its own
