"""Waiting, all of it in one place, and the queueing package's one entry: how long a
request may wait, whether it joins the line for its tier's bucket or is answered at once,
and the wait itself: for the bucket to refill (in its line: budget_line.py), then for a
slot (the admission queue: queue.py, in the scheduler's order); or answered at once when
that wait is foreseen to outlast what it may wait (forecast.py).

How long it may wait (`patience`): its tier's max_queue_wait_seconds, or less when its
TTFT target leaves less (a stream's target less the time from admission to its first
token, foreseen by first_token.py), or when its client says so (X-QoS-Max-Wait-Ms: a whole
number of milliseconds from its arrival). A client cannot ask for more than its tier
allows; 0 asks to be served at once or not at all. A stream of a sheddable tier whose
first token is foreseen past its target even if admitted at once is answered at once
(shed_first_token_foreseen): it would be late whatever followed. But for a probe now and
then, when none of its tier was timed for a while: the engine may be fast again.

The bucket's line: a newcomer that finds others waiting for its tier's bucket does not
ask before them: it joins their line, or is answered at once when its turn would come too
late or it costs more than the budget serves (`line_ahead`); one its bucket refused for
now waits in the line when the refill comes within its wait (`line_after`). The budget
stage takes and offers the cost; the line asks it again, through `BudgetAsk`, as the
bucket refills.

The wait (`turn`) takes what the budget stage decided (`Wait`) and returns one outcome,
the request's `Turn`; a request that gets none raises the Refusal its answer is made
from, having given back the budget it took. Before it waits it holds its exchange (Envoy
is told to wait as long as the request may). A stream whose turn came after a wait is
foreseen its first token again: foreseen past its TTFT target, it is answered rather than
admitted late, when its tier may be shed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from sidecar.config.base import Tier
from sidecar.config.pools import Pool
from sidecar.config.schema import QueueConfig, TierConfig
from sidecar.loops.overload.shedding import SheddingState
from sidecar.refusals import Reason, Refusal, shed
from sidecar.request.limiter.buckets import BucketSpec, Verdict
from sidecar.request.limiter.verdicts import budget_reason, budget_refusal
from sidecar.request.policy.cost import Reservation
from sidecar.request.policy.decision import FirstTokenForecast, Hold, RequestView
from sidecar.request.queueing.budget_line import BudgetWaiters, Demand, waiting_key
from sidecar.request.queueing.first_token import FirstTokenForecaster
from sidecar.request.queueing.queue import AdmissionQueue, QueueFull

__all__ = [
    "MAX_WAIT_HEADER",
    "AdmissionQueue",
    "BudgetAsk",
    "BudgetTurn",
    "FirstTokenDue",
    "InLine",
    "Patience",
    "Turn",
    "Wait",
    "Waiting",
    "max_wait",
]

MAX_WAIT_HEADER = "x-qos-max-wait-ms"


class BudgetAsk(Protocol):
    """One more budget call for a request in its bucket's line, made by the budget stage
    when its turn comes."""

    async def __call__(self) -> Verdict: ...


@dataclass(frozen=True)
class Patience:
    """How long a request may wait, and for a stream the first token foreseen."""

    max_wait: float  # seconds
    first_token: FirstTokenForecast | None = None


@dataclass(frozen=True)
class InLine:
    """A place in the line for a tier's bucket."""

    refused: Verdict  # the bucket's latest refusal (its own, or the line's)
    foreseen: float  # seconds until its turn in the line, as foreseen


@dataclass(frozen=True)
class BudgetTurn:
    """A wait for the tier's bucket to refill, in its line, before the slot."""

    bucket: BucketSpec  # the tier's: whose line it waits in
    cost: float
    refused: Verdict  # the bucket's latest refusal (its own, or the line's)
    foreseen: float  # seconds until its turn in the line, as foreseen
    ask: BudgetAsk  # one budget call, when its turn comes


@dataclass(frozen=True)
class FirstTokenDue:
    """When a stream's first token is due, to foresee it again when its turn comes."""

    target: float  # seconds from its arrival: its tier's TTFT target in its pool
    foreseen: float  # seconds from admission to its first token, as foreseen at pricing
    cost: float  # in its pool's tokens: what it weighs in the forecast
    sheddable: bool  # foreseen late, it is answered (else admitted, late)


@dataclass(frozen=True)
class Wait:
    """What one request waits for, and for how long at most."""

    tier: Tier
    tenant: str
    pool: Pool
    stream: bool
    max_wait: float  # seconds
    hurried: bool  # its client asked to wait less than its tier allows
    # What it takes (or took) from its budgets, settled at its end; given back if it is
    # refused after taking it.
    reservation: Reservation | None = None
    budget: BudgetTurn | None = None  # None: its budgets took it already
    first_token: FirstTokenDue | None = None  # a stream's, foreseen at its pricing


@dataclass(frozen=True)
class Turn:
    """A request's turn come: the slot it holds ("" with no concurrency limit)."""

    slot: str = ""
    waited: float | None = None  # seconds waited for the slot; None without one
    foreseen: float | None = None  # seconds its wait was foreseen to take, if it was
    first_token: FirstTokenForecast | None = None  # foreseen again after its wait


class Waiting:
    def __init__(
        self,
        queue: AdmissionQueue | None,  # None: nobody waits; admitted without a slot
        give_back: Callable[[Reservation | None], None],
        clock: Callable[[], float],
        shedding: Callable[[], SheddingState] | None = None,  # None: no first token foreseen
    ) -> None:
        self._queue = queue
        self._give_back = give_back
        self._clock = clock
        self._first_tokens = (
            FirstTokenForecaster(queue, shedding)
            if queue is not None and shedding is not None
            else None
        )
        # The lines for the tiers' buckets (none where nobody waits).
        self._lines = BudgetWaiters(clock) if queue is not None else None
        self._demand = Demand(clock)

    def patience(
        self,
        view: RequestView,
        pool: Pool,
        tier: Tier,
        settings: TierConfig,
        cost: float,
        stream: bool,
        shedding: SheddingState,
        config: QueueConfig,
    ) -> Patience:
        """How long a request may wait (`cost`: what it asked, in its pool's tokens;
        `shedding`: the state its decision reads); a stream foreseen late even if admitted
        at once is refused, when its tier may be shed and it is no probe."""
        forecaster = self._first_tokens
        if forecaster is None or not stream or not config.foresee_waits:
            return Patience(max_wait(view.headers, settings))
        first_token = forecaster.foresee(tier, pool, cost, state=shedding.for_pool(pool.name))
        leaves = pool.slo[tier].ttft_ms / 1000 - first_token.seconds
        late = leaves <= 0 and settings.sheddable
        # A probe is to be timed: one whose response is watched (sampled at its headers).
        probed = late and view.response_watched and forecaster.probe(tier, pool, first_token)
        if late and not probed:
            # To come back once the engine's queue has drained by what it is late by.
            raise shed(Reason.SHED_FIRST_TOKEN_FORESEEN, tier.value, -leaves)
        leaves -= first_token.growth  # the wait's end foreseen later than now
        return Patience(max_wait(view.headers, settings, leaves), first_token)

    def line_ahead(
        self, tier: Tier, bucket: BucketSpec, cost: float, wait: float, config: QueueConfig
    ) -> InLine | None:
        """Where a newcomer of a sheddable tier goes while others wait for its tier's
        `bucket`: behind them, or answered at once when its turn would come too late or
        it costs more than the budget serves. None: nobody waits; it asks."""
        lines = self._lines
        if lines is None:
            return None
        self._demand.note(bucket.key, cost)
        key = waiting_key(bucket)
        last = lines.ahead(key)
        if last is None:
            return None
        foreseen = lines.foreseen(key, bucket.rate, cost, self._clock() + wait)
        too_late = foreseen > wait - lines.margin(key)
        cutoff = self._demand.cutoff
        if config.foresee_waits and (too_late or cost > cutoff(bucket.key, bucket.rate)):
            # To come back once the line has drained by what it outlasts its wait by.
            raise shed(budget_reason(last), tier.value, max(foreseen - wait, 0.0))
        return InLine(last, foreseen)

    def line_after(self, refused: Verdict, wait: float) -> InLine | None:
        """A place in the line for a request its tier's bucket refused for now: when the
        bucket refills within `wait` seconds. None: it is refused."""
        if self._lines is None or refused.retry_after is None or refused.retry_after > wait:
            return None
        return InLine(refused, refused.retry_after)

    async def turn(self, wait: Wait, hold: Hold) -> Turn:
        """Its turn: a slot at once when one is free and nobody who goes first waits;
        else, held, in line for its bucket (when its budgets have not taken it yet) and
        then in the queue, within its wait."""
        queue = self._queue
        if queue is None:
            return Turn()
        started = self._clock()
        if wait.budget is None:
            slot = queue.try_take(wait.tier, wait.tenant, wait.stream, wait.pool, wait.reservation)
            if slot is not None:
                return Turn(slot.id, 0.0)
            foreseen = self._slot_foreseen(queue, wait)
        else:
            foreseen = wait.budget.foreseen
        await hold(wait.max_wait)
        if wait.budget is not None:
            await self._budget_turn(wait, wait.budget, started + wait.max_wait)
        try:
            slot = await queue.wait(
                wait.tier,
                wait.tenant,
                started + wait.max_wait - self._clock(),
                wait.stream,
                wait.pool,
                wait.reservation,
                hurried=wait.hurried,
            )
        except QueueFull:
            slot = None
            reason = Reason.SHED_QUEUE_FULL
        else:
            reason = Reason.SHED_QUEUE_TIMEOUT
        if slot is None:
            self._give_back(wait.reservation)
            foreseen = queue.foreseen_wait(wait.tier, wait.pool)
            raise shed(reason, wait.tier.value, _drained_within(foreseen, wait.max_wait))
        waited = self._clock() - started
        first_token = self._first_token_after(queue, wait, slot.id, waited)
        return Turn(slot.id, waited, foreseen, first_token)

    def _first_token_after(
        self, queue: AdmissionQueue, wait: Wait, slot: str, waited: float
    ) -> FirstTokenForecast | None:
        """A stream's first token foreseen again as it is admitted; one foreseen past its
        target is refused, its slot and budget given back, when its tier may be shed."""
        due = wait.first_token
        if due is None or self._first_tokens is None:
            return None
        forecast = self._first_tokens.foresee(wait.tier, wait.pool, due.cost, at_admission=True)
        queue.first_tokens.note_growth(wait.tier, wait.pool.name, forecast.seconds - due.foreseen)
        late_by = waited + forecast.seconds - due.target
        if due.sheddable and late_by > 0:
            queue.cancel(slot)
            self._give_back(wait.reservation)
            raise shed(Reason.SHED_FIRST_TOKEN_FORESEEN, wait.tier.value, late_by)
        return forecast

    def _slot_foreseen(self, queue: AdmissionQueue, wait: Wait) -> float | None:
        """The foreseen wait for a slot, when it may wait that long; else its refusal (its
        budget given back)."""
        foreseen = queue.foreseen_wait(wait.tier, wait.pool)
        if wait.max_wait <= 0:  # its client will not wait at all
            reason = Reason.SHED_QUEUE_TIMEOUT
        elif foreseen is not None and foreseen > wait.max_wait:
            reason = Reason.SHED_QUEUE_FORESEEN
        else:
            return foreseen
        self._give_back(wait.reservation)
        raise shed(reason, wait.tier.value, _drained_within(foreseen, wait.max_wait))

    async def _budget_turn(self, wait: Wait, budget: BudgetTurn, deadline: float) -> None:
        """In line for the bucket's refill until it takes the request, within its wait."""
        assert self._lines is not None
        verdict = await self._lines.wait(
            budget.cost,
            waiting_key(budget.bucket),
            budget.bucket.rate,
            budget.refused,
            deadline,
            budget.ask,
        )
        if not verdict.allowed:
            raise budget_refusal(wait.tier.value, wait.tenant, budget.cost, verdict, budget.bucket)


def max_wait(
    headers: Mapping[str, str], tier: TierConfig, target_leaves: float | None = None
) -> float:
    """Seconds the request may wait (headers by lower-case name; `target_leaves`: what
    its TTFT target leaves for waiting, None when not known)."""
    limit = tier.max_queue_wait_seconds
    if target_leaves is not None:
        limit = max(0.0, min(limit, target_leaves))
    asked = headers.get(MAX_WAIT_HEADER)
    if asked is None:
        return limit
    text = asked.strip()
    if not text.isdigit() or not text.isascii():
        raise Refusal(
            Reason.INVALID_REQUEST,
            f"The header {MAX_WAIT_HEADER} must be a whole number of milliseconds "
            f"(0 or more), not {asked[:40]!r}.",
        )
    return min(limit, int(text) / 1000)


def _drained_within(foreseen: float | None, max_wait: float) -> float | None:
    """When a newcomer's wait for a slot is foreseen within what it may wait: once the
    queue ahead has drained by what the wait outlasts it by (None: nothing foreseen)."""
    return None if foreseen is None else max(foreseen - max(max_wait, 0.0), 0.0)
