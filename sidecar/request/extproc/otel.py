"""The decisions' spans with the OpenTelemetry SDK and its OTLP exporter (tracing.py
says when and how it is configured)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sidecar.request.extproc import otlp_export
from sidecar.request.extproc.otlp_export import OtlpSettingInvalid, OtlpTarget
from sidecar.request.extproc.tracing import (
    SPAN_NAME,
    Mark,
    Traced,
    recording,
    span_attributes,
    with_upstream_headers,
)
from sidecar.request.policy.decision import Decision, RequestView, Respond

PROPAGATOR = TraceContextTextMapPropagator()


class _Traced:
    def __init__(self, span: trace.Span, marks: list[Mark]) -> None:
        self._span = span
        self._marks = marks

    def finish(self, decision: Decision, seconds: float) -> Decision:
        span = self._span
        for stage, at in self._marks:
            span.add_event(stage, timestamp=at)
        span.set_attributes(span_attributes(decision, seconds))
        if isinstance(decision, Respond):
            span.set_attribute("http.response.status_code", decision.status)
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return with_upstream_headers(decision, carrier)


class OtelTracing:
    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("qos-sidecar")

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> OtelTracing:
        resource = Resource.create(
            {SERVICE_NAME: environment.get("OTEL_SERVICE_NAME") or "qos-sidecar"}
        )
        provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER
        provider.add_span_processor(BatchSpanProcessor(_exporter(environment)))
        return cls(provider)

    @contextlib.contextmanager
    def span(self, view: RequestView) -> Iterator[Traced]:
        parent = PROPAGATOR.extract(view.headers)
        with (
            self._tracer.start_as_current_span(
                SPAN_NAME, context=parent, kind=trace.SpanKind.SERVER
            ) as span,
            recording() as marks,
        ):
            span.set_attribute("http.request.method", view.method)
            span.set_attribute("url.path", view.path)
            yield _Traced(span, marks)

    def shutdown(self) -> None:
        self._provider.shutdown()  # what is batched is sent first


def _exporter(environment: Mapping[str, str]) -> SpanExporter:
    try:
        target = OtlpTarget.from_environment(environment)
    except OtlpSettingInvalid as error:
        raise SystemExit(str(error)) from None
    return otlp_export.exporter(target)
