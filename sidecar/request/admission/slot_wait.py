"""A slot for a request its budgets admitted: at once when one is free and nobody who
goes first is waiting; else held in the queue for at most what it may wait, or answered
at once when that wait is foreseen to outlast it (queueing/forecast.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sidecar.refusals import Reason
from sidecar.request.admission.refunds import Refunds
from sidecar.request.admission.request import AdmissionRequest
from sidecar.request.admission.tagging import admit
from sidecar.request.policy.decision import Admit, Admitted, Decision, Final, Hold
from sidecar.request.queueing.queue import AdmissionQueue, QueueFull


class SlotWait:
    def __init__(
        self, queue: AdmissionQueue | None, refunds: Refunds, clock: Callable[[], float]
    ) -> None:
        self._queue = queue  # None: no concurrency limit, admitted without a slot
        self._refunds = refunds
        self._clock = clock

    async def take(
        self, request: AdmissionRequest, reason: Admitted = Admitted.ADMITTED
    ) -> Decision:
        if self._queue is None:
            return admit(
                request.view, request.identity, request.engine(), reason, pool=request.pool
            )
        stream = request.parsed.stream
        slot = self._queue.try_take(
            request.tier, request.identity.tenant_label, stream, request.pool, request.reservation
        )
        if slot is not None:
            return self._admitted(request, reason, slot.id, 0.0)
        if request.max_wait <= 0:  # its client will not wait at all
            return request.refuse(Reason.SHED_QUEUE_TIMEOUT)
        foreseen = self._queue.foreseen_wait(request.tier, request.pool)
        if foreseen is not None and foreseen > request.max_wait:
            return request.refuse(Reason.SHED_QUEUE_FORESEEN)
        return Hold(
            lambda: self.wait(request, request.max_wait, self._clock(), reason, foreseen),
            request.max_wait,
            tier=request.tier.value,
        )

    async def wait(
        self,
        request: AdmissionRequest,
        max_wait: float,
        started: float,
        reason: Admitted = Admitted.ADMITTED,
        foreseen: float | None = None,
    ) -> Final:
        """A slot within `max_wait`, or the tier's fallback (its budget given back)."""
        assert self._queue is not None
        try:
            slot = await self._queue.wait(
                request.tier,
                request.identity.tenant_label,
                max_wait,
                request.parsed.stream,
                request.pool,
                request.reservation,
                hurried=request.max_wait < request.tier_config.max_queue_wait_seconds,
            )
        except QueueFull:
            self._refunds.give_all_back(request.reservation)
            return request.refuse(Reason.SHED_QUEUE_FULL)
        if slot is None:
            self._refunds.give_all_back(request.reservation)
            return request.refuse(Reason.SHED_QUEUE_TIMEOUT)
        waited = self._clock() - started
        return self._admitted(request, reason, slot.id, waited, foreseen)

    def _admitted(
        self,
        request: AdmissionRequest,
        reason: Admitted,
        slot: str,
        waited: float,
        foreseen: float | None = None,
    ) -> Admit:
        admitted = admit(
            request.view, request.identity, request.engine(), reason, slot, waited, request.pool
        )
        admitted = dataclasses.replace(admitted, foreseen_wait=foreseen)
        if request.parsed.stream and request.view.response_watched:
            # Time this stream's first token: its response body will be watched.
            return dataclasses.replace(admitted, time_first_byte=True)
        return admitted
