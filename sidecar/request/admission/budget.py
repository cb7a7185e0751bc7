"""Budget: the request's cost taken from its budgets (budgets.py) in one Redis call (or,
while its tier's bucket has headroom, at once and charged behind: limiter/headroom.py), the
admission counted in its pool's load from before the call until it is confirmed or not
(loops/overload/admitted.py). The call settles where the request goes too: where it may
be served elsewhere (overflow.py), the next pool's budgets are offered in the same call,
and the script takes from them when its own pool's would shed it; a pool further down
is asked in a call of its own.

What the call decides: taken (or, for a tier never shed for budget, admitted over it),
then a slot; short, but the bucket refills within what the request may wait: it waits
in the bucket's line; else refused. A newcomer that finds others waiting for its tier's
bucket does not ask before them: it joins their line, or is answered at once when its
turn would come too late or it costs more than the budget serves
(queueing/budget_cutoff.py). Waiting itself is queueing/waiting.py's, handed a `Wait`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sidecar.budget_layout import AdmittedLoad
from sidecar.config.base import Tier
from sidecar.config.pools import Pool
from sidecar.loops.overload.admitted import ProjectedAdmission
from sidecar.loops.overload.shedding import SheddingState
from sidecar.refusals import Reason, Refusal, shed
from sidecar.request.admission.budgets import BucketsMemo
from sidecar.request.admission.overflow import OVERFLOW_REASONS, Places
from sidecar.request.admission.refunds import BucketLevels
from sidecar.request.admission.request import Placement
from sidecar.request.limiter.buckets import Alternative, BucketSpec, Limiter, Owner, Verdict
from sidecar.request.limiter.verdicts import budget_reason, budget_refusal
from sidecar.request.policy.decision import Admitted
from sidecar.request.queueing.budget_cutoff import Demand
from sidecar.request.queueing.budget_line import BudgetWaiters, waiting_key
from sidecar.request.queueing.waiting import BudgetTurn, FirstTokenDue, Wait


class Projection(Protocol):
    def project(
        self, tier: Tier, pool: Pool, prompt_tokens: int, even_over_budget: bool
    ) -> ProjectedAdmission | None: ...


@dataclass(frozen=True)
class Budgeted:
    """Where the request is served, as its budgets there took it, and what it waits for."""

    place: Placement
    reason: Admitted
    wait: Wait
    moved_for: Reason | None = None  # why its own pool did not take it, when another did


@dataclass(frozen=True)
class _Offer:
    """Another pool's budgets, offered in the same call."""

    place: Placement
    buckets: list[BucketSpec]
    projected: ProjectedAdmission | None

    def alternative(self, beyond: float) -> Alternative:
        load = self.projected.load if self.projected is not None else None
        return Alternative(self.place.charge.reserved, self.buckets, load, beyond)


# What one call settled: the request budgeted or refused, and whether the pool offered
# in it refused it too.
_Tried = tuple[Budgeted | Refusal, bool]


class Budget:
    def __init__(
        self,
        limiter: Limiter,
        levels: BucketLevels,
        shedding: Callable[[], SheddingState],
        projection: Projection | None,
        lines: BudgetWaiters | None,  # None: nobody waits for budget (nor for a slot)
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limiter = limiter
        self._levels = levels
        self._shedding = shedding
        self._projection = projection
        self._lines = lines
        self._demand = Demand(clock)
        self._clock = clock
        self._budget_buckets = BucketsMemo()

    async def take(self, places: Places) -> Budgeted:
        """The first place whose budgets take the request, or in whose line it waits:
        its own pool unless shed there for load, then the pools its tier overflows to
        should its own refuse it for one of OVERFLOW_REASONS. Raises its own pool's
        refusal when none takes it."""
        refused = places.home_shed
        todo = list(places.elsewhere) if refused else [places.home, *places.elsewhere]
        while todo:
            place = todo.pop(0)
            outcome, offer_refused = await self._take_at(place, todo[0] if todo else None)
            if isinstance(outcome, Budgeted):
                if refused is not None:  # served by another pool than its own
                    outcome = dataclasses.replace(outcome, moved_for=refused.reason)
                return outcome
            if offer_refused:
                todo.pop(0)
            if place is places.home:
                refused = outcome
                if outcome.reason not in OVERFLOW_REASONS:
                    raise outcome
        assert refused is not None
        raise refused

    async def _take_at(self, place: Placement, offered: Placement | None) -> _Tried:
        buckets = self._buckets(place)
        try:
            place = place.within(buckets)
        except Refusal as refusal:
            return refusal, False
        if self._lines is not None and place.settings.sheddable:
            in_line = self._behind_others(self._lines, place, buckets)
            if in_line is not None:
                return in_line, False
        projected = self._project(place)
        offer = self._offer(place, offered) if offered is not None else None
        otherwise = offer.alternative(place.max_wait) if offer is not None else None
        try:
            verdict = await self._limiter.acquire(
                place.charge.reserved, buckets, _load_of(projected), otherwise
            )
            if offer is not None and verdict.elsewhere:
                return self._taken(offer.place, offer.buckets, verdict, offer.projected), False
            return self._answered(place, buckets, verdict, projected), verdict.elsewhere is False
        finally:
            for counted in (projected, offer.projected if offer is not None else None):
                if counted is not None:
                    counted.cancel()  # not admitted (a no-op when it was confirmed)

    def _answered(
        self,
        place: Placement,
        buckets: list[BucketSpec],
        verdict: Verdict,
        projected: ProjectedAdmission | None,
    ) -> Budgeted | Refusal:
        """What its own budgets' verdict makes of the request."""
        if verdict.allowed:
            return self._taken(place, buckets, verdict, projected)
        self._levels[place.pool.name, place.tier] = verdict.remaining
        if verdict.retry_after is not None and _short_of_tier_budget(verdict):
            if not place.settings.sheddable:
                _confirm(projected, verdict)
                return Budgeted(place, Admitted.OVER_BUDGET, _wait(place))
            if self._lines is not None and verdict.retry_after <= place.max_wait:
                return self._in_line(place, buckets, verdict, verdict.retry_after)
        identity = place.asked.identity
        tier, tenant = identity.tier.value, identity.tenant_label
        return budget_refusal(tier, tenant, place.charge.reserved, verdict, buckets[0])

    def _taken(
        self,
        place: Placement,
        buckets: list[BucketSpec],
        verdict: Verdict,
        projected: ProjectedAdmission | None,
    ) -> Budgeted:
        self._levels[place.pool.name, place.tier] = verdict.remaining
        _confirm(projected, verdict)
        reserved = place.reserved(buckets)
        moved_for = Reason.SHED_TIER_BUDGET if verdict.elsewhere else None
        return Budgeted(reserved, Admitted.ADMITTED, _wait(reserved), moved_for)

    def _behind_others(
        self, lines: BudgetWaiters, place: Placement, buckets: list[BucketSpec]
    ) -> Budgeted | Refusal | None:
        """While others wait for its tier's budget a newcomer does not ask before them:
        it joins their line, or is answered at once. None: nobody waits; it asks."""
        tier_bucket, cost = buckets[0], place.charge.reserved
        self._demand.note(tier_bucket.key, cost)
        key = waiting_key(tier_bucket)
        last = lines.ahead(key)
        if last is None:
            return None
        foreseen = lines.foreseen(key, tier_bucket.rate, cost, self._clock() + place.max_wait)
        if place.asked.snapshot.config.queue.foresee_waits and (
            foreseen > place.max_wait - lines.margin(key)
            or cost > self._demand.cutoff(tier_bucket.key, tier_bucket.rate)
        ):
            return shed(budget_reason(last), place.tier.value)
        return self._in_line(place, buckets, last, foreseen)

    def _in_line(
        self, place: Placement, buckets: list[BucketSpec], refused: Verdict, foreseen: float
    ) -> Budgeted:
        """To wait in the line of its tier's bucket: `refused` its latest refusal, its
        turn foreseen in `foreseen` s."""
        reserved = place.reserved(buckets)
        ask = functools.partial(self._ask, place, buckets)
        turn = BudgetTurn(buckets[0], place.charge.reserved, refused, foreseen, ask)
        return Budgeted(reserved, Admitted.ADMITTED, _wait(reserved, turn))

    async def _ask(self, place: Placement, buckets: list[BucketSpec]) -> Verdict:
        """One budget call for a waiter, counted in its pool's load while it asks."""
        projected = self._project(place)
        try:
            answer = await self._limiter.acquire(
                place.charge.reserved, buckets, _load_of(projected)
            )
            if answer.allowed:
                _confirm(projected, answer)
            return answer
        finally:
            if projected is not None:
                projected.cancel()  # a no-op once confirmed

    def _offer(self, place: Placement, offered: Placement) -> _Offer | None:
        """The next place's budgets, for the same call: only when the request's own
        bucket was short at its last answer (one its pool admits costs nothing more)."""
        if not place.settings.sheddable:
            return None
        level = self._levels.get((place.pool.name, place.tier))
        if level is not None and level >= place.charge.reserved:
            return None  # likely admitted here
        buckets = self._buckets(offered)
        try:
            offered = offered.within(buckets)
        except Refusal:
            return None
        return _Offer(offered, buckets, self._project(offered))

    def _buckets(self, place: Placement) -> list[BucketSpec]:
        # The pool's capacity follows the pods that say theirs.
        capacity = self._shedding().for_pool(place.pool.name).capacity(place.pool)
        return self._budget_buckets(
            place.asked.snapshot, place.asked.identity, place.pool, capacity
        )

    def _project(self, place: Placement) -> ProjectedAdmission | None:
        if self._projection is None:
            return None
        return self._projection.project(
            place.tier,
            place.pool,
            place.charge.prompt_tokens,
            even_over_budget=not place.settings.sheddable,
        )


def _wait(place: Placement, budget: BudgetTurn | None = None) -> Wait:
    settings = place.settings
    return Wait(
        place.tier,
        place.asked.identity.tenant_label,
        place.pool,
        place.asked.parsed.stream,
        place.max_wait,
        hurried=place.max_wait < settings.max_queue_wait_seconds,
        reservation=place.reservation,
        budget=budget,
        first_token=_first_token_due(place),
    )


def _first_token_due(place: Placement) -> FirstTokenDue | None:
    if place.first_token is None:
        return None
    target = place.pool.slo[place.tier].ttft_ms / 1000
    foreseen = place.first_token.seconds
    return FirstTokenDue(target, foreseen, place.charge.asked, place.settings.sheddable)


def _confirm(projected: ProjectedAdmission | None, verdict: Verdict) -> None:
    if projected is not None:
        later = verdict.recorded_later
        projected.confirm(verdict.recorded_us, recorded_later=later is not None)
        if later is not None:  # charged behind: recorded then
            later.then(projected.recorded)


def _short_of_tier_budget(verdict: Verdict) -> bool:
    return verdict.refused is None or verdict.refused.owner is Owner.TIER


def _load_of(projected: ProjectedAdmission | None) -> AdmittedLoad | None:
    return projected.load if projected is not None else None
