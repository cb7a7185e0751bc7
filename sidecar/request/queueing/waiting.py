"""Waiting for admission, all of it in one place: for the tier's budget to refill (in its
line: budget_line.py), then for a slot (the admission queue: queue.py, in the
scheduler's order), within the time the request may wait; or answered at once when that
wait is foreseen to outlast it (forecast.py).

One entry, `Waiting.turn`, takes what the budget stage decided (`Wait`) and returns one
outcome, the request's `Turn`; a request that gets none raises the Refusal its answer is
made from, having given back the budget it took. Before it waits it holds its exchange
(Envoy is told to wait as long as the request may). A stream whose turn came after a
wait is foreseen its first token again (first_token.py): foreseen past its TTFT target,
it is answered rather than admitted late, when its tier may be shed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sidecar.config.base import Tier
from sidecar.config.pools import Pool
from sidecar.refusals import Reason, shed
from sidecar.request.limiter.buckets import BucketSpec, Verdict
from sidecar.request.limiter.verdicts import budget_refusal
from sidecar.request.policy.cost import Reservation
from sidecar.request.policy.decision import FirstTokenForecast, Hold
from sidecar.request.queueing.budget_line import BudgetWaiters, waiting_key
from sidecar.request.queueing.first_token import FirstTokenForecaster
from sidecar.request.queueing.queue import AdmissionQueue, QueueFull


@dataclass(frozen=True)
class BudgetTurn:
    """A wait for the tier's bucket to refill, in its line, before the slot."""

    bucket: BucketSpec  # the tier's: whose line it waits in
    cost: float
    refused: Verdict  # the bucket's latest refusal (its own, or the line's)
    foreseen: float  # seconds until its turn in the line, as foreseen
    ask: Callable[[], Awaitable[Verdict]]  # one budget call, when its turn comes


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
        first_tokens: FirstTokenForecaster | None = None,
    ) -> None:
        self._queue = queue
        self._give_back = give_back
        self._clock = clock
        self._first_tokens = first_tokens
        # The lines for the tiers' buckets, which the budget stage looks at before it asks.
        self.lines = BudgetWaiters(clock) if queue is not None else None

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
            raise shed(reason, wait.tier.value)
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
        if due.sheddable and waited + forecast.seconds > due.target:
            queue.cancel(slot)
            self._give_back(wait.reservation)
            raise shed(Reason.SHED_FIRST_TOKEN_FORESEEN, wait.tier.value)
        return forecast

    def _slot_foreseen(self, queue: AdmissionQueue, wait: Wait) -> float | None:
        """The foreseen wait for a slot, when it may wait that long; else its refusal (its
        budget given back)."""
        reason = None
        foreseen = None
        if wait.max_wait <= 0:  # its client will not wait at all
            reason = Reason.SHED_QUEUE_TIMEOUT
        else:
            foreseen = queue.foreseen_wait(wait.tier, wait.pool)
            if foreseen is not None and foreseen > wait.max_wait:
                reason = Reason.SHED_QUEUE_FORESEEN
        if reason is not None:
            self._give_back(wait.reservation)
            raise shed(reason, wait.tier.value)
        return foreseen

    async def _budget_turn(self, wait: Wait, budget: BudgetTurn, deadline: float) -> None:
        """In line for the bucket's refill until it takes the request, within its wait."""
        assert self.lines is not None
        verdict = await self.lines.wait(
            budget.cost,
            waiting_key(budget.bucket),
            budget.bucket.rate,
            budget.refused,
            deadline,
            budget.ask,
        )
        if not verdict.allowed:
            raise budget_refusal(wait.tier.value, wait.tenant, budget.cost, verdict, budget.bucket)
