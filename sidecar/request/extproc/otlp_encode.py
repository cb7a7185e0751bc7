"""Finished spans as an OTLP trace export request (qos/otlp/v1/trace.proto: OTLP's field
numbers in a package of the sidecar's own, so no other copy of OpenTelemetry's protos on
the machine can shadow them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext

from sidecar.generated.qos.otlp.v1 import trace_pb2 as otlp

# Span.flags, as OpenTelemetry's own encoder sets them: whether the parent (or a link's
# span) was another process's is known, and whether it was.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


def export_request(spans: Sequence[ReadableSpan]) -> otlp.ExportTraceServiceRequest:
    """`spans` grouped by resource, then by instrumentation scope, as OTLP wants them."""
    by_resource: dict[Resource, dict[InstrumentationScope | None, list[ReadableSpan]]] = {}
    for span in spans:
        scopes = by_resource.setdefault(span.resource, {})
        scopes.setdefault(span.instrumentation_scope, []).append(span)
    request = otlp.ExportTraceServiceRequest()
    for resource, scopes in by_resource.items():
        resource_spans = request.resource_spans.add(schema_url=resource.schema_url)
        _fill(resource_spans.resource.attributes, resource.attributes)
        for scope, scoped in scopes.items():
            scope_spans = resource_spans.scope_spans.add()
            if scope is not None:
                scope_spans.scope.name = scope.name
                scope_spans.scope.version = scope.version or ""
                scope_spans.schema_url = scope.schema_url or ""
            for span in scoped:
                _span(scope_spans.spans.add(), span)
    return request


def _span(message: otlp.Span, span: ReadableSpan) -> None:
    context = span.context
    assert context is not None  # a finished span of the SDK has one
    message.trace_id = context.trace_id.to_bytes(16, "big")
    message.span_id = context.span_id.to_bytes(8, "big")
    message.trace_state = context.trace_state.to_header() if context.trace_state else ""
    message.flags = _flags(span.parent)
    if span.parent is not None:
        message.parent_span_id = span.parent.span_id.to_bytes(8, "big")
    message.name = span.name
    # The SDK counts from INTERNAL = 0, OTLP from INTERNAL = 1.
    message.kind = otlp.Span.SpanKind.ValueType(span.kind.value + 1)
    message.start_time_unix_nano = span.start_time or 0
    message.end_time_unix_nano = span.end_time or 0
    _fill(message.attributes, span.attributes or {})
    message.dropped_attributes_count = span.dropped_attributes
    for event in span.events:
        added = message.events.add(time_unix_nano=event.timestamp, name=event.name)
        _fill(added.attributes, event.attributes or {})
    message.dropped_events_count = span.dropped_events
    for link in span.links:
        linked = message.links.add(
            trace_id=link.context.trace_id.to_bytes(16, "big"),
            span_id=link.context.span_id.to_bytes(8, "big"),
            flags=_flags(link.context),
        )
        _fill(linked.attributes, link.attributes or {})
    message.dropped_links_count = span.dropped_links
    message.status.code = otlp.Status.StatusCode.ValueType(span.status.status_code.value)
    message.status.message = span.status.description or ""


def _flags(other: SpanContext | None) -> int:
    return _HAS_IS_REMOTE | _IS_REMOTE if other is not None and other.is_remote else _HAS_IS_REMOTE


def _fill(into: Any, attributes: Mapping[str, Any]) -> None:
    for key, value in attributes.items():
        _value(into.add(key=key).value, value)


def _value(into: otlp.AnyValue, value: Any) -> None:
    if isinstance(value, bool):  # before int: a bool is an int to Python
        into.bool_value = value
    elif isinstance(value, int):
        into.int_value = value
    elif isinstance(value, float):
        into.double_value = value
    elif isinstance(value, str):
        into.string_value = value
    elif isinstance(value, bytes):
        into.bytes_value = value
    elif isinstance(value, Iterable):
        into.array_value.SetInParent()
        for item in value:
            _value(into.array_value.values.add(), item)
    else:
        into.string_value = str(value)
