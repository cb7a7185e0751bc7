"""OpenTelemetry traces of the decisions, configured only by the standard environment
variables, and off unless an OTLP endpoint is given.

On (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set, and
`OTEL_SDK_DISABLED` not true): each decision is a span `qos.decision` in the client's
trace when it sent a W3C `traceparent` (a new trace when not), with the decision's fields
as `qos.*` attributes (the decision log's) and an event per admission stage; an admitted
request goes upstream with a `traceparent` naming that span, so the engine's spans join
the trace. The SDK reads the rest itself: `OTEL_SERVICE_NAME` (default qos-sidecar),
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and its argument (default: parent-based,
always on), `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `grpc`),
`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`. Off, nothing of the SDK is loaded and a
client's `traceparent` passes upstream as it came.

The director marks each admission stage as it ends (`span_event`); a trace turns the
marks into the span's events. Nothing is kept when no trace records them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from sidecar.request.extproc.decision_telemetry import decision_fields
from sidecar.request.policy.decision import Admit, Decision, RequestView

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
SPAN_NAME = "qos.decision"

T = TypeVar("T")

Mark = tuple[str, int]  # the stage, and when it ended (ns since the epoch)

_marks: ContextVar[list[Mark] | None] = ContextVar("qos_stage_marks", default=None)


def span_event(stage: str, value: T) -> T:
    """`value`, the stage's result, once the stage is marked as ended."""
    marks = _marks.get()
    if marks is not None:
        marks.append((stage, time.time_ns()))
    return value


@contextlib.contextmanager
def recording() -> Iterator[list[Mark]]:
    """The marks made within the block (by this task and those it awaits)."""
    marks: list[Mark] = []
    token = _marks.set(marks)
    try:
        yield marks
    finally:
        _marks.reset(token)


class Traced(Protocol):
    def finish(self, decision: Decision, seconds: float) -> Decision: ...


class DecisionTracer(Protocol):
    def span(self, view: RequestView) -> contextlib.AbstractContextManager[Traced]: ...

    def shutdown(self) -> None: ...


class _Untraced:
    def finish(self, decision: Decision, seconds: float) -> Decision:
        return decision


# Reused by every decision: no generator or object made per request while tracing is off.
_NO_SPAN = contextlib.nullcontext(_Untraced())


class NoTracing:
    def span(self, view: RequestView) -> contextlib.AbstractContextManager[Traced]:
        return _NO_SPAN

    def shutdown(self) -> None:
        pass


def enabled(environment: Mapping[str, str] = os.environ) -> bool:
    if environment.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environment.get(name) for name in ENDPOINT_VARIABLES)


def from_environment(environment: Mapping[str, str] = os.environ) -> DecisionTracer:
    if not enabled(environment):
        return NoTracing()
    from sidecar.request.extproc.otel import OtelTracing  # the SDK, only when asked for

    return OtelTracing.from_environment(environment)


def span_attributes(decision: Decision, seconds: float) -> dict[str, Any]:
    return {f"qos.{name}": value for name, value in decision_fields(decision, seconds).items()}


def with_upstream_headers(decision: Decision, headers: Mapping[str, str]) -> Decision:
    """An admitted request, to go upstream with these (trace context) headers too."""
    if not isinstance(decision, Admit) or not headers:
        return decision
    upstream = dataclasses.replace(
        decision.upstream, set_headers={**decision.upstream.set_headers, **headers}
    )
    return dataclasses.replace(decision, upstream=upstream)
