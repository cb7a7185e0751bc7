"""What the end of an admitted exchange does: its slot given back, what it reserved
settled against what it used, and its latency sampled for the SLO controller. Fed by
Envoy's access log, by the ext_proc stream's end, and by a sibling worker."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from sidecar.config.base import Tier
from sidecar.config.pools import DEFAULT_POOL
from sidecar.config.snapshot import Snapshot
from sidecar.loops.slo.samples import LATENCY, TTFT, SampleRecorder
from sidecar.metrics import SidecarMetrics
from sidecar.request.completion.access_log import ExchangeEnd
from sidecar.request.completion.settlement import refused, settle
from sidecar.request.policy.cost import Reservation
from sidecar.request.policy.decision import Admission
from sidecar.request.queueing.queue import AdmissionQueue
from sidecar.request.queueing.slots import Slot

# How long after an exchange's ext_proc stream ends its slot waits for the access log.
UNLOGGED_GRACE_SECONDS = 1.0
# Ends of work the engine did: what its service rate is measured by.
SERVED = ("completed", "client_gone", "timed_out")

GiveBack = Callable[[Reservation, float], None]
FirstToken = Callable[[Tier, str, float], None]
Served = Callable[[str, float], None]  # an answer of a pool ended: what it cost its budgets


class ExchangeEnds:
    def __init__(
        self,
        queue: AdmissionQueue,
        metrics: SidecarMetrics,
        samples: SampleRecorder,
        snapshot: Callable[[], Snapshot],
        give_back: GiveBack | None,  # None: nothing is ever reserved (QoS off)
        first_token: FirstToken,
        served: Served = lambda _pool, _cost: None,
    ) -> None:
        self._queue = queue
        self._served = served
        self._metrics = metrics
        self._samples = samples
        self._snapshot = snapshot
        self._give_back = give_back
        self._first_token = first_token
        # Where an end this worker holds no slot for goes: its sibling workers.
        self.forward: Callable[[ExchangeEnd], object] | None = None
        # Slots whose ext_proc stream ended, with when to give them back should the
        # access log not have: in the order they ended, so their deadlines are in order.
        self._unlogged: deque[tuple[float, str]] = deque()
        self._sweep: asyncio.TimerHandle | None = None

    def ended(self, end: ExchangeEnd) -> None:
        slot = self._queue.release(end.slot)
        if slot is None:
            if self.forward is not None:
                self.forward(end)  # another worker's exchange
            return
        reservation = slot.reservation
        cost = (
            self._prompt_cost(slot, end)
            if reservation is None
            else self._settle(slot, reservation, end)
        )
        how = _how(end)
        self._metrics.child(self._metrics.exchange_ends, slot.tier.value, how).inc()
        if how in SERVED and cost is not None:
            self._served(slot.pool, cost)
        # A whole answer's SLO is its total time; a streamed one's is its first token's.
        if not slot.stream and how != "client_gone" and end.seconds_total is not None:
            self._samples.record(
                slot.tier,
                LATENCY,
                end.seconds_total,
                failed=end.status >= 500 or how != "completed",
                pool=self._snapshot().pools.get(slot.pool),
            )

    def first_byte(self, admitted: Admission, seconds: float) -> None:
        if admitted.tier:
            tier, pool_name = Tier(admitted.tier), admitted.pool or DEFAULT_POOL
            pool = self._snapshot().pools.get(admitted.pool)
            self._samples.record(tier, TTFT, seconds, pool=pool)
            self._first_token(tier, pool_name, seconds)
            # What admission foresees a stream's first token by (queueing/first_token.py):
            # the time beyond the engine queue foreseen for it, and the forecast's error.
            served_in = seconds - (admitted.queue_wait or 0.0)
            foreseen, again = admitted.first_token, admitted.first_token_again
            engine_queue = foreseen.engine_queue if foreseen is not None else 0.0
            beyond_again = served_in - again.engine_queue if again is not None else None
            self._queue.first_tokens.note(tier, pool_name, served_in - engine_queue, beyond_again)
            if foreseen is not None and foreseen.rest is not None:
                error = self._metrics.child(self._metrics.first_token_error, tier.value, pool_name)
                error.observe(served_in - foreseen.seconds)

    def stream_ended(self, slot: str) -> None:
        # The access log normally gives the slot back, with the exchange's outcome and
        # timings; give it a moment to. What it never names (the client left before
        # Envoy applied the decision) is given back here. One timer for all of them
        # (every admitted exchange ends so): the earliest deadline's.
        loop = asyncio.get_running_loop()
        self._unlogged.append((loop.time() + UNLOGGED_GRACE_SECONDS, slot))
        if self._sweep is None:
            self._sweep = loop.call_later(UNLOGGED_GRACE_SECONDS, self._unlogged_ends)

    def _unlogged_ends(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._unlogged and self._unlogged[0][0] <= now:
            _, slot = self._unlogged.popleft()
            released = self._queue.release(slot)
            if released is not None:
                self._metrics.child(
                    self._metrics.exchange_ends, released.tier.value, "before_response"
                ).inc()
        self._sweep = None
        if self._unlogged:
            self._sweep = loop.call_at(self._unlogged[0][0], self._unlogged_ends)

    def _prompt_cost(self, slot: Slot, end: ExchangeEnd) -> float | None:
        """What an answer charged for its prompt alone cost: the prompt's count in its
        usage, as its tier weighs it; None when the answer gave no count."""
        if end.prompt_tokens is None:
            return None
        pool = self._snapshot().pools.get(slot.pool)
        return end.prompt_tokens * (pool.tiers[slot.tier].weight if pool else 1.0)

    def _settle(self, slot: Slot, reservation: Reservation, end: ExchangeEnd) -> float:
        """Give the buckets back what the request did not use, or take what it owes; what
        it cost in the end (its reservation, when its answer says nothing to settle by)."""
        settled = settle(slot.stream, reservation, end)
        if settled is None:
            return reservation.charge.reserved
        if settled.estimate_error is not None:
            self._metrics.estimate_error.observe(settled.estimate_error)
        if self._give_back is not None:
            self._give_back(reservation, -settled.difference)
        tier = slot.tier.value
        self._metrics.child(self._metrics.output_reserved, tier).inc(
            reservation.charge.expected_output
        )
        self._metrics.child(self._metrics.output_settled, tier, settled.source).inc(settled.output)
        return reservation.charge.reserved + settled.difference


def _how(end: ExchangeEnd) -> str:
    flags = end.response_flags
    if flags.downstream_connection_termination or flags.downstream_remote_reset:
        return "client_gone"
    if (
        flags.upstream_connection_failure
        or flags.upstream_remote_reset
        or flags.no_healthy_upstream
    ):
        return "upstream_failed"
    if flags.upstream_request_timeout or flags.stream_idle_timeout:
        return "timed_out"
    if refused(end):
        return "refused"
    return "completed"
