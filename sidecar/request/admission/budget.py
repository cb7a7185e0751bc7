"""Budget: the request's cost taken from its budgets in one Redis call (or, while its
tier's bucket has headroom, at once and charged behind: limiter/headroom.py), the
admission counted in its pool's load from before the call until it is confirmed or not
(loops/overload/admitted.py). The call settles where the request goes too: where it may
be served elsewhere (candidates.py), the next pool's budgets are offered in the same
call, and the script takes from them when its own pool's would shed it; a pool further
down is asked in a call of its own.

Its budgets: the tier's bucket in its pool (shared fairly by the tier's tenants) and its
tenant's own, with their rates, bursts and debts, remembered for the configuration in
force (the same tenant asks the same buckets over and over). It reserves no more than its
smallest bucket holds; the rest of its cost is owed when its answer is settled.

What the call decides: taken (or, for a tier never shed for budget, admitted over it),
then a slot; short, but the bucket refills within what the request may wait: it waits
in the bucket's line; else refused. Whether it joins a line, before it asks or once
refused, is waiting's to say (queueing/waiting.py), and so is the wait itself, handed a
`Wait`; the line asks again through `BudgetAsk`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Protocol

from sidecar.budget_layout import (
    AdmittedLoad,
    fair_share_keys,
    tenant_bucket_key,
    tier_bucket_key,
)
from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.pools import Pool
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.admitted import ProjectedAdmission
from sidecar.loops.overload.load import ClusterLoad
from sidecar.refusals import Reason, Refusal
from sidecar.request.admission.candidates import OVERFLOW_REASONS, Candidates
from sidecar.request.admission.identity import Identity
from sidecar.request.admission.refunds import BucketLevels
from sidecar.request.admission.request import Placement
from sidecar.request.bodies.parsed import TextForm
from sidecar.request.limiter.buckets import (
    Alternative,
    BucketSpec,
    FairShare,
    Limiter,
    Owner,
    Verdict,
)
from sidecar.request.limiter.verdicts import budget_refusal, too_big
from sidecar.request.policy.cost import Charge, Reservation
from sidecar.request.policy.decision import Admitted
from sidecar.request.queueing.waiting import BudgetTurn, FirstTokenDue, InLine, Wait, Waiting

_BURST = attrgetter("burst")


class Projection(Protocol):
    def project(
        self,
        tier: Tier,
        pool: Pool,
        prompt_tokens: int,
        even_over_budget: bool,
        reported: ClusterLoad,
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


@dataclass(frozen=True)
class _AskAgain:
    """A waiter's budget call when its turn in line comes (waiting's `BudgetAsk`)."""

    budget: Budget
    place: Placement
    buckets: list[BucketSpec]

    async def __call__(self) -> Verdict:
        return await self.budget.ask_again(self.place, self.buckets)


# What one call settled: the request budgeted or refused, and whether the pool offered
# in it refused it too.
_Tried = tuple[Budgeted | Refusal, bool]


class Budget:
    def __init__(
        self,
        limiter: Limiter,
        levels: BucketLevels,
        projection: Projection | None,
        waiting: Waiting,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limiter = limiter
        self._levels = levels
        self._projection = projection
        self._waiting = waiting
        self._clock = clock
        self._budget_buckets = BucketsMemo()

    async def take(self, candidates: Candidates) -> Budgeted:
        """The first candidate whose budgets take the request, or in whose line it waits:
        its own pool unless shed there for load, then the pools its tier overflows to
        should its own refuse it for one of OVERFLOW_REASONS. Raises its own pool's
        refusal when none takes it."""
        refused = candidates.home_shed
        todo = list(candidates.elsewhere) if refused else [candidates.home, *candidates.elsewhere]
        while todo:
            place = todo.pop(0)
            outcome, offer_refused = await self._take_at(place, todo[0] if todo else None)
            if isinstance(outcome, Budgeted):
                if refused is not None:  # served by another pool than its own
                    outcome = dataclasses.replace(outcome, moved_for=refused.reason)
                return outcome
            if offer_refused:
                todo.pop(0)
            if place is candidates.home:
                refused = outcome
                if outcome.reason not in OVERFLOW_REASONS:
                    raise outcome
        assert refused is not None
        raise refused

    async def _take_at(self, place: Placement, offered: Placement | None) -> _Tried:
        buckets = self._buckets(place)
        try:
            place = _within(place, buckets)
        except Refusal as refusal:
            return refusal, False
        if place.settings.sheddable:
            config = place.request.snapshot.config.queue
            in_line = self._waiting.line_ahead(
                place.tier, buckets[0], place.charge.reserved, place.max_wait, config
            )
            if in_line is not None:
                return self._in_line(place, buckets, in_line), False
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
            in_line = self._waiting.line_after(verdict, place.max_wait)
            if in_line is not None:
                return self._in_line(place, buckets, in_line)
        identity = place.request.identity
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
        reserved = _reserved(place, buckets)
        moved_for = Reason.SHED_TIER_BUDGET if verdict.elsewhere else None
        return Budgeted(reserved, Admitted.ADMITTED, _wait(reserved), moved_for)

    def _in_line(self, place: Placement, buckets: list[BucketSpec], line: InLine) -> Budgeted:
        """To wait in the line of its tier's bucket, asking again when its turn comes."""
        reserved = _reserved(place, buckets)
        ask = _AskAgain(self, place, buckets)
        cost = place.charge.reserved
        turn = BudgetTurn(buckets[0], cost, line.refused, line.foreseen, ask)
        return Budgeted(reserved, Admitted.ADMITTED, _wait(reserved, turn))

    async def ask_again(self, place: Placement, buckets: list[BucketSpec]) -> Verdict:
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
            offered = _within(offered, buckets)
        except Refusal:
            return None
        return _Offer(offered, buckets, self._project(offered))

    def _buckets(self, place: Placement) -> list[BucketSpec]:
        # The pool's capacity follows the pods that say theirs.
        request = place.request
        capacity = request.shedding.for_pool(place.pool.name).capacity(place.pool)
        return self._budget_buckets(request.snapshot, request.identity, place.pool, capacity)

    def _project(self, place: Placement) -> ProjectedAdmission | None:
        request = place.request
        if self._projection is None or not request.snapshot.config.overload.project_admissions:
            return None
        return self._projection.project(
            place.tier,
            place.pool,
            place.charge.prompt_tokens,
            not place.settings.sheddable,
            request.shedding.for_pool(place.pool.name).load,
        )


def _within(place: Placement, buckets: list[BucketSpec]) -> Placement:
    """Reserving no more than its smallest bucket holds (the rest of its cost is owed when
    its answer is settled); refused when its prompt alone is more."""
    smallest = min(buckets, key=_BURST)
    asked = place.charge
    charge = Charge(
        asked.prompt_tokens,
        asked.expected_output,
        asked.weight,
        asked.output_weight,
        smallest.burst,
    )
    if charge.prompt_cost > smallest.burst:
        identity = place.request.identity
        raise too_big(identity.tier.value, identity.tenant_label, charge.prompt_cost, smallest)
    return _changed(place, charge=charge)


def _reserved(place: Placement, buckets: list[BucketSpec]) -> Placement:
    """With what it takes from `buckets`, when its end settles it: when its tier charges
    output, or when part of its prompt was a configured estimate (media, a stored
    conversation) that the answer's usage corrects. Otherwise it is charged its prompt
    only: nothing to settle."""
    parsed = place.request.parsed
    if place.charge.output_weight <= 0 and not parsed.prompt.estimated_from_outside:
        return place
    text = parsed.shape.text
    reservation = Reservation(
        place.charge,
        tuple(buckets),
        text is TextForm.CHAT,
        parsed.model or "",
        place.pool.name,
        place.tier,
        sized=text in (TextForm.CHAT, TextForm.COMPLETION),
    )
    return _changed(place, reservation=reservation)


def _changed(place: Placement, **changes: Any) -> Placement:
    """`dataclasses.replace` for a Placement (it has no __post_init__): its fields copied
    rather than passed through __init__ again, a fifth of the cost on every decision."""
    copy = object.__new__(Placement)
    copy.__dict__.update(place.__dict__, **changes)
    return copy


def _wait(place: Placement, budget: BudgetTurn | None = None) -> Wait:
    settings = place.settings
    return Wait(
        place.tier,
        place.request.identity.tenant_label,
        place.pool,
        place.request.parsed.stream,
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


def budget_buckets(
    snapshot: Snapshot, identity: Identity, pool: Pool, capacity: float
) -> list[BucketSpec]:
    tier = identity.tier
    settings = pool.tiers[tier]
    rate = snapshot.share(tier, pool) * capacity
    burst = rate * settings.burst_seconds
    tenant = snapshot.tenants.get(identity.tenant or "")
    fair = _fair_share(snapshot, identity, tenant, pool, burst)
    debt = settings.max_debt_seconds
    buckets = [BucketSpec(tier_bucket_key(tier.value, pool.name), rate, burst, fair, rate * debt)]
    if tenant is not None:
        tenant_rate, kept_for = tenant.rate_in(pool.name)
        if tenant_rate is not None:
            key = tenant_bucket_key(tier.value, identity.tenant_label, kept_for)
            tenant_burst = tenant_rate * tenant.burst_seconds
            owed = tenant_rate * debt
            buckets.append(BucketSpec(key, tenant_rate, tenant_burst, None, owed, Owner.TENANT))
    return buckets


def _fair_share(
    snapshot: Snapshot, identity: Identity, tenant: Tenant | None, pool: Pool, burst: float
) -> FairShare | None:
    """Who asks the tier's bucket, for its fair shares (None: fairness is off)."""
    fairness = snapshot.config.fairness
    if not fairness.enabled:
        return None
    state_key, active_key = fair_share_keys(identity.tier.value, pool.name)
    return FairShare(
        state_key,
        active_key,
        identity.tenant_label,
        tenant.weight if tenant is not None else 1.0,
        fairness.window_seconds,
        fairness.active_seconds,
        fairness.reserve * burst,
    )


# Tenant, pool and capacity combinations remembered at most, before the memo starts anew.
MEMO_ENTRIES = 4096


class BucketsMemo:
    """budget_buckets(), kept for the configuration in force: a new snapshot (config,
    tenants or the controller's shares changed) starts it anew."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None  # held: its buckets are the memo's
        self._known: dict[tuple[Identity, str, float], tuple[BucketSpec, ...]] = {}

    def __call__(
        self, snapshot: Snapshot, identity: Identity, pool: Pool, capacity: float
    ) -> list[BucketSpec]:
        if snapshot is not self._snapshot or len(self._known) >= MEMO_ENTRIES:
            self._snapshot, self._known = snapshot, {}
        key = (identity, pool.name, capacity)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = tuple(budget_buckets(snapshot, identity, pool, capacity))
        return list(found)
