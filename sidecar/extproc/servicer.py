"""The gRPC ExternalProcessor service: one bidirectional stream per HTTP exchange."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from sidecar.extproc.exchange import Exchange, Phase, ProtocolError
from sidecar.metrics import SidecarMetrics
from sidecar.policy.decision import Admit, Decider, Decision

log = logging.getLogger(__name__)


class ExternalProcessor(ext_proc_grpc.ExternalProcessorServicer):
    def __init__(
        self,
        decider: Decider,
        metrics: SidecarMetrics,
        release_slot: Callable[[str], object] | None = None,
        on_first_byte: Callable[[Admit, float], None] | None = None,
    ) -> None:
        self._decider = decider
        self._metrics = metrics
        self._release_slot = release_slot
        self._on_first_byte = on_first_byte

    async def Process(
        self,
        request_iterator: AsyncIterator[ext_proc.ProcessingRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[ext_proc.ProcessingResponse]:
        exchange = Exchange(self._decider, self._record, self._on_first_byte)
        self._metrics.streams_open.inc()
        try:
            async for message in request_iterator:
                try:
                    async for answer in exchange.answers(message):
                        yield answer
                except ProtocolError as error:
                    self._metrics.protocol_errors.inc()
                    log.warning("ext_proc protocol error: %s", error)
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
                if exchange.phase is Phase.DONE:
                    return
        finally:
            self._metrics.streams_open.dec()
            admitted = exchange.admitted
            if (
                self._release_slot is not None
                and admitted is not None
                and admitted.slot
                and exchange.phase is Phase.RESPONSE_HEADERS
            ):
                # The stream ended before any response: the client left, or the upstream
                # failed, before the request got anywhere. Its slot is free now; Envoy's
                # access log, should it name the slot too, finds it given back already.
                self._release_slot(admitted.slot)

    def _record(self, decision: Decision, seconds: float) -> None:
        outcome = "admit" if isinstance(decision, Admit) else "respond"
        self._metrics.decisions.labels(decision.tier or "none", outcome, decision.reason).inc()
        self._metrics.decision_seconds.observe(seconds)
        if isinstance(decision, Admit) and decision.queue_wait is not None:
            self._metrics.queue_wait_seconds.labels(decision.tier).observe(decision.queue_wait)
