"""The gRPC ExternalProcessor service: one bidirectional stream per HTTP exchange."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from sidecar.extproc.exchange import Exchange, Phase, ProtocolError
from sidecar.metrics import SidecarMetrics
from sidecar.policy.decision import Admit, Decider, Decision

log = logging.getLogger(__name__)


class ExternalProcessor(ext_proc_grpc.ExternalProcessorServicer):
    def __init__(self, decider: Decider, metrics: SidecarMetrics) -> None:
        self._decider = decider
        self._metrics = metrics

    async def Process(
        self,
        request_iterator: AsyncIterator[ext_proc.ProcessingRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[ext_proc.ProcessingResponse]:
        exchange = Exchange(self._decider, on_decision=self._record)
        self._metrics.streams_open.inc()
        try:
            async for message in request_iterator:
                try:
                    response = await exchange.handle(message)
                except ProtocolError as error:
                    self._metrics.protocol_errors.inc()
                    log.warning("ext_proc protocol error: %s", error)
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
                yield response
                if exchange.phase is Phase.DONE:
                    return
        finally:
            self._metrics.streams_open.dec()

    def _record(self, decision: Decision, seconds: float) -> None:
        outcome = "admit" if isinstance(decision, Admit) else "respond"
        self._metrics.decisions.labels(decision.tier or "none", outcome, decision.reason).inc()
        self._metrics.decision_seconds.observe(seconds)
