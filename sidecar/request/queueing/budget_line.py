"""Requests waiting in line for their tier's bucket to refill, within what each may wait.

One line per bucket (per tenant in a tier shared fairly: `waiting_key`). Only the
head of a line asks Redis, as the bucket refills; the others wait their turn. A newcomer
that finds a line does not ask before those in it (it would take the refill they wait
for). Each waiter is foreseen its turn: when the bucket holds the head's cost, then the
others' costs ahead of it at the bucket's rate. A newcomer goes ahead of a waiter that
costs more (shortest first: more requests served from the same budget), or whose turn
would otherwise come too late for it, but only of one whose turn then still comes within
its own wait; it is answered at once when its own turn would not.

The turns come at the pace the line was last served, not at the bucket's nominal rate:
what other sidecars take from the same bucket, and what answers that cost more than they
reserved settle from it, make the refill slower for the line; refunds make it faster.
The pace is the time between successive grants over the cost/rate each was foreseen to
take (the last `PACE_GRANTS` of the bucket's lines).

The pace is right on average; one waiter's turn still comes later than foreseen when
cheaper newcomers pass it or the refill stalls. The line keeps a margin before every
deadline, the `MARGIN_QUANTILE` of how much later than foreseen its waiters' turns came
lately (the last `PACE_GRANTS`): a newcomer whose turn would come within the margin of
its deadline is answered at once, and nobody passes a waiter into its margin. Without
it, the waiters whose turns are foreseen close to their deadline (where passing pushes
them) are answered only after waiting out their time.

Which of them the budget serves when they ask for more than it refills: the cheapest.
While a line waits for the tier's bucket, a newcomer that costs more than the cutoff
(`Demand`) is answered at once: the cutoff is the largest cost such that the requests
asking over the last `CUTOFF_WINDOW_SECONDS` that cost no more would have needed no more
than the bucket's rate. The same budget then serves more requests, and the line stays
short enough that the waits foreseen in it hold.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sidecar.request.limiter.buckets import BucketSpec, Verdict

PACE_GRANTS = 32
MIN_PACE_GRANTS = 4
PACE_LIMITS = (0.5, 3.0)  # a slowness outside is an outlier's, not the bucket's
MARGIN_QUANTILE = 0.95
CUTOFF_WINDOW_SECONDS = 10.0


class _Pace:
    """How much slower than its rate a bucket lately served its line (1: as the rate)."""

    def __init__(self) -> None:
        self._grants: deque[tuple[float, float]] = deque(maxlen=PACE_GRANTS)
        self._late: deque[float] = deque(maxlen=PACE_GRANTS)  # turns past their foreseen

    def note(self, took: float, foreseen: float) -> None:
        self._grants.append((took, foreseen))

    def note_turn(self, late_by: float) -> None:
        self._late.append(late_by)

    def margin(self) -> float:
        """Seconds to keep before a deadline: how much later than foreseen turns came."""
        if len(self._late) < MIN_PACE_GRANTS:
            return 0.0
        late = sorted(self._late)
        return max(0.0, late[int(MARGIN_QUANTILE * (len(late) - 1))])

    def slowness(self) -> float:
        if len(self._grants) < MIN_PACE_GRANTS:
            return 1.0
        took = sum(t for t, _ in self._grants)
        foreseen = sum(f for _, f in self._grants)
        low, high = PACE_LIMITS
        return min(high, max(low, took / foreseen)) if foreseen > 0 else 1.0


def waiting_key(refused: BucketSpec) -> str:
    """Whom a request waits behind: those of its bucket or, in a tier shared fairly, those
    of its own tenant (a tenant over its share waits for what lies above the tier's
    reserve; the others must not wait behind it)."""
    return refused.key if refused.fair is None else f"{refused.key}|{refused.fair.tenant}"


@dataclass(eq=False)
class _Waiter:
    cost: float
    deadline: float
    turn: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(eq=False)
class _Line:
    last: Verdict  # the latest refusal of the bucket: what a newcomer turned away is told
    ready_at: float  # when the bucket holds what its head waits for, as last told
    waiters: list[_Waiter] = field(default_factory=list)
    granted_at: float | None = None  # its latest grant

    def turns(self, now: float, rate: float) -> list[float]:
        """When each waiter's turn is foreseen to come."""
        at = max(now, self.ready_at)
        turns = [at]
        for waiter in self.waiters[1:]:
            at += waiter.cost / rate
            turns.append(at)
        return turns

    def place(
        self, now: float, rate: float, cost: float, deadline: float, margin: float
    ) -> tuple[int, float]:
        """Where a newcomer goes (never before the head) and when its turn comes there,
        every deadline kept `margin` seconds clear."""
        turns = self.turns(now, rate)
        takes = cost / rate
        place = len(self.waiters)
        while place > 1:
            passed = self.waiters[place - 1]
            behind_it = turns[place - 1] + takes  # its turn behind `passed`...
            if passed.cost <= cost and behind_it <= deadline - margin:
                break  # not dearer, and not too late for it: it waits behind
            if behind_it > passed.deadline - margin:  # ...and `passed`'s turn if it goes ahead
                break  # no time to spare for it
            place -= 1
        return place, turns[place - 1] + takes


class BudgetWaiters:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lines: dict[str, _Line] = {}
        self._paces: dict[str, _Pace] = {}  # by key, kept between lines

    def ahead(self, key: str) -> Verdict | None:
        """The bucket's latest refusal while a line waits for it; None when none does."""
        line = self._lines.get(key)
        return line.last if line is not None else None

    def foreseen(self, key: str, rate: float, cost: float, deadline: float) -> float:
        """Seconds until the turn of a newcomer costing `cost` in the bucket's line."""
        line = self._lines.get(key)
        now = self._clock()
        rate = self._paced(key, rate)
        if line is None:
            return cost / rate
        return line.place(now, rate, cost, deadline, self.margin(key))[1] - now

    def margin(self, key: str) -> float:
        """Seconds the line of `key` keeps clear before a waiter's deadline."""
        pace = self._paces.get(key)
        return pace.margin() if pace is not None else 0.0

    def _paced(self, key: str, rate: float) -> float:
        """The rate the line of `key` is served at, as lately."""
        pace = self._paces.get(key)
        return rate / pace.slowness() if pace is not None else rate

    def _granted(
        self, key: str, line: _Line, cost: float, rate: float, late_by: float | None
    ) -> None:
        """A waiter of `line` was granted: after another's grant, the time between them
        teaches the pace; `late_by`: how much later than foreseen its turn came."""
        now = self._clock()
        pace = self._paces.setdefault(key, _Pace())
        if line.granted_at is not None:
            pace.note(now - line.granted_at, cost / rate)
        if late_by is not None:
            pace.note_turn(late_by)
        line.granted_at = now

    async def wait(
        self,
        cost: float,
        key: str,
        rate: float,
        verdict: Verdict,
        deadline: float,
        ask: Callable[[], Awaitable[Verdict]],
    ) -> Verdict:
        """Wait in line, then ask again (`ask`: one budget call) as the bucket refills,
        until it allows or the deadline would pass: the last verdict, allowed or not.
        `verdict` is the newcomer's own refusal, or the line's when it did not ask."""
        now = self._clock()
        line = self._lines.setdefault(key, _Line(verdict, now + (verdict.retry_after or 0.0)))
        waiter = _Waiter(cost, deadline)
        first = not line.waiters
        if first:
            place, turn_at = 0, line.ready_at
        else:
            margin = self.margin(key)
            place, turn_at = line.place(now, self._paced(key, rate), cost, deadline, margin)
        line.waiters.insert(place, waiter)
        try:
            if first:
                waiter.turn.set()
            elif not await self._turn(waiter, deadline):
                return line.last
            # The head asks at once when it came by turn: the bucket held its predecessor.
            delay = (verdict.retry_after or 0.0) if first else 0.0
            while True:
                if delay > 0:
                    if self._clock() + delay > deadline:
                        return verdict
                    await asyncio.sleep(delay)
                verdict = await ask()
                if verdict.allowed:
                    late_by = None if first else self._clock() - turn_at
                    self._granted(key, line, cost, rate, late_by)
                if verdict.allowed or verdict.retry_after is None:
                    return verdict
                if verdict.refused is None or waiting_key(verdict.refused) != key:
                    return verdict  # another of its buckets refused it: not this line's
                line.last = verdict
                line.ready_at = self._clock() + verdict.retry_after
                delay = verdict.retry_after
        finally:
            self._leave(key, line, waiter)

    async def _turn(self, waiter: _Waiter, deadline: float) -> bool:
        try:
            async with asyncio.timeout(max(0.0, deadline - self._clock())):
                await waiter.turn.wait()
        except TimeoutError:
            return False
        return True

    def _leave(self, key: str, line: _Line, waiter: _Waiter) -> None:
        line.waiters.remove(waiter)
        if not line.waiters:
            del self._lines[key]
        elif not line.waiters[0].turn.is_set():
            line.ready_at = self._clock()  # the new head asks at once
            line.waiters[0].turn.set()


class Demand:
    """The costs that asked a bucket lately."""

    def __init__(self, clock: Callable[[], float], window: float = CUTOFF_WINDOW_SECONDS) -> None:
        self._clock = clock
        self._window = window
        self._asked: dict[str, deque[tuple[float, float]]] = {}

    def note(self, key: str, cost: float) -> None:
        now = self._clock()
        asked = self._asked.setdefault(key, deque())
        asked.append((now, cost))
        while asked[0][0] < now - self._window:
            asked.popleft()

    def cutoff(self, key: str, rate: float) -> float:
        """The dearest cost the bucket's rate serves of what asked lately (inf: all)."""
        asked = self._asked.get(key)
        if not asked:
            return math.inf
        now = self._clock()
        # Over the whole window even when it was watched for less: lenient at first.
        refills = rate * self._window
        total, dearest = 0.0, 0.0
        for cost in sorted(cost for at, cost in asked if at >= now - self._window):
            total += cost
            if total > refills:
                return dearest
            dearest = cost
        return math.inf
