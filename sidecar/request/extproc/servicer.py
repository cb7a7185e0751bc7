"""The gRPC ExternalProcessor service: one bidirectional stream per HTTP exchange."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from sidecar.metrics import SidecarMetrics
from sidecar.request.extproc.exchange import Exchange, Phase, ProtocolError
from sidecar.request.policy.decision import Admit, Admitted, Decider, Final, Respond

log = logging.getLogger(__name__)


class ExternalProcessor(ext_proc_grpc.ExternalProcessorServicer):
    def __init__(
        self,
        decider: Decider,
        metrics: SidecarMetrics,
        stream_ended: Callable[[str], object] | None = None,
        on_first_byte: Callable[[Admit, float], None] | None = None,
    ) -> None:
        self._decider = decider
        self._metrics = metrics
        self._stream_ended = stream_ended  # with the slot of an admitted exchange
        self._on_first_byte = on_first_byte

    async def Process(
        self,
        request_iterator: AsyncIterator[ext_proc.ProcessingRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        # The stream read and written through its context: a coroutine, not an async
        # generator over gRPC's request iterator (each a layer the loop registers).
        exchange = Exchange(self._decider, self._record, self._on_first_byte)
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
            admitted = exchange.admitted
            if (
                self._stream_ended is not None
                and admitted is not None
                and admitted.slot
                and closed_by_envoy
            ):
                # Envoy keeps the stream open until the exchange ends, so its exchange is
                # over, or the client left while it was being decided; then the access
                # log may not name the slot (Envoy never applied the decision).
                self._stream_ended(admitted.slot)

    def _record(self, decision: Final, seconds: float) -> None:
        outcome = "admit" if isinstance(decision, Admit) else "respond"
        self._metrics.decisions.labels(
            decision.tier or "none", outcome, decision.label, decision.pool or "none"
        ).inc()
        self._metrics.decision_seconds.observe(seconds)
        if isinstance(decision, Admit) and decision.cost is not None:
            self._metrics.admitted_cost.labels(decision.tier, decision.route).inc(decision.cost)
        if isinstance(decision, Admit) and decision.overflowed_from:
            moved = (decision.overflowed_from, decision.pool, decision.tier)
            self._metrics.overflowed.labels(*moved).inc()
            self._metrics.overflowed_tokens.labels(*moved).inc(decision.cost or 0.0)
        if isinstance(decision, Admit) and decision.reason is Admitted.DECIDER_ERROR:
            self._metrics.decider_errors.inc()
        if isinstance(decision, Respond) and decision.waited is not None:
            self._metrics.shed_after_wait.labels(
                decision.tier or "none", decision.label, decision.pool or "none"
            ).observe(decision.waited)
        if isinstance(decision, Admit) and decision.queue_wait is not None:
            self._metrics.queue_wait_seconds.labels(decision.tier).observe(decision.queue_wait)
            if decision.foreseen_wait is not None:
                self._metrics.queue_wait_error.labels(decision.tier, decision.pool).observe(
                    decision.queue_wait - decision.foreseen_wait
                )
