"""Waiting for a tier's budget: a newcomer that finds others waiting for its tier's
bucket joins their line (budget_line.py) or is answered at once when its turn would come
too late or it costs more than the budget serves (budget_cutoff.py); one the bucket
refused waits in line when the bucket refills within its wait. Then a slot."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sidecar.request.admission.budget_cutoff import Demand
from sidecar.request.admission.budget_line import BudgetWaiters
from sidecar.request.admission.budgets import budget_reason, budget_refusal, waiting_key
from sidecar.request.admission.request import AdmissionRequest
from sidecar.request.admission.slot_wait import SlotWait
from sidecar.request.limiter.buckets import BucketSpec, Verdict
from sidecar.request.policy.decision import Final, Hold, Respond

# One budget call for a request (counted in its pool's load while it asks).
AskBudget = Callable[[AdmissionRequest, list[BucketSpec]], Awaitable[Verdict]]


class BudgetWait:
    def __init__(self, ask: AskBudget, slots: SlotWait, clock: Callable[[], float]) -> None:
        self._ask = ask
        self._slots = slots
        self._clock = clock
        self._line = BudgetWaiters(clock)
        self._demand = Demand(clock)

    def behind_others(
        self, request: AdmissionRequest, buckets: list[BucketSpec]
    ) -> Hold | Respond | None:
        """While others wait for its tier's budget a newcomer does not ask before them:
        held in their line, or answered at once. None: nobody waits; it asks."""
        tier_bucket, cost = buckets[0], request.charge.reserved
        self._demand.note(tier_bucket.key, cost)
        key = waiting_key(tier_bucket)
        last = self._line.ahead(key)
        if last is None:
            return None
        deadline = self._clock() + request.max_wait
        foreseen = self._line.foreseen(key, tier_bucket.rate, cost, deadline)
        if request.snapshot.config.queue.foresee_waits and (
            foreseen > request.max_wait
            or cost > self._demand.cutoff(tier_bucket.key, tier_bucket.rate)
        ):
            return request.refuse(budget_reason(last))
        return self.hold(request, buckets, last, foreseen)

    def hold(
        self,
        request: AdmissionRequest,
        buckets: list[BucketSpec],
        verdict: Verdict,
        foreseen: float,
    ) -> Hold:
        """Held for budget: `verdict` the bucket's refusal, its turn in `foreseen` s."""
        return Hold(
            lambda: self._wait(request, buckets, verdict, foreseen),
            request.max_wait,
            tier=request.tier.value,
        )

    async def _wait(
        self,
        request: AdmissionRequest,
        buckets: list[BucketSpec],
        verdict: Verdict,
        foreseen: float,
    ) -> Final:
        """In line for the bucket's refill, then for a slot, within its wait."""
        started = self._clock()
        deadline = started + request.max_wait
        cost, tier_bucket = request.charge.reserved, buckets[0]
        verdict = await self._line.wait(
            cost,
            waiting_key(tier_bucket),
            tier_bucket.rate,
            verdict,
            deadline,
            lambda: self._ask(request, buckets),
        )
        if not verdict.allowed:
            return request.answer(budget_refusal(request.identity, cost, verdict, tier_bucket))
        reserved = request.reserved(buckets)
        left = deadline - self._clock()
        return await self._slots.wait(reserved, left, started, foreseen=foreseen)
