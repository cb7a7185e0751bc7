"""The gRPC ExternalProcessor service: one bidirectional stream per HTTP exchange."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from sidecar.metrics import SidecarMetrics
from sidecar.request.eviction.evictions import Evictions
from sidecar.request.extproc.decision_telemetry import count_decision
from sidecar.request.extproc.exchange import NO_TRACING, Exchange, Phase, ProtocolError
from sidecar.request.extproc.tracing import DecisionTracer
from sidecar.request.policy.decision import Admission, Decider, Decision

log = logging.getLogger(__name__)


class ExternalProcessor(ext_proc_grpc.ExternalProcessorServicer):
    def __init__(
        self,
        decider: Decider,
        metrics: SidecarMetrics,
        stream_ended: Callable[[str], object] | None = None,
        on_first_byte: Callable[[Admission, float], None] | None = None,
        on_decision: Callable[[Decision, float], None] | None = None,
        tracer: DecisionTracer = NO_TRACING,
        evictions: Evictions | None = None,
    ) -> None:
        self._decider = decider
        self._metrics = metrics
        self._on_decision = on_decision  # besides the metrics: the decision log
        self._tracer = tracer
        self._stream_ended = stream_ended  # with the slot of an admitted exchange
        self._on_first_byte = on_first_byte
        self._evictions = evictions  # the streams that may be ended early

    async def Process(
        self,
        request_iterator: AsyncIterator[ext_proc.ProcessingRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        # The stream read and written through its context: a coroutine, not an async
        # generator over gRPC's request iterator (each a layer the loop registers).
        exchange = Exchange(
            self._decider, self._counted, self._on_first_byte, self._tracer, self._evictions
        )
        self._metrics.streams_open.inc()
        closed_by_envoy = True
        try:
            while (message := await context.read()) is not grpc.aio.EOF:
                try:
                    await exchange.answer(message, context.write)
                except ProtocolError as error:
                    self._metrics.protocol_errors.inc()
                    log.warning("ext_proc protocol error: %s", error)
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
                if exchange.phase is Phase.DONE:
                    closed_by_envoy = False
                    return
        finally:
            self._metrics.streams_open.dec()
            exchange.close()
            admitted = exchange.admitted
            if (
                self._stream_ended is not None
                and admitted is not None
                and admitted.record.slot
                and closed_by_envoy
            ):
                # Envoy keeps the stream open until the exchange ends, so its exchange is
                # over, or the client left while it was being decided; then the access
                # log may not name the slot (Envoy never applied the decision).
                self._stream_ended(admitted.record.slot)

    def _counted(self, decision: Decision, seconds: float) -> None:
        count_decision(self._metrics, decision, seconds)
        if self._on_decision is not None:
            self._on_decision(decision, seconds)
