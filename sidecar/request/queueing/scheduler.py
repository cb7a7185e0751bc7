"""Who is released next from the admission queue. Pure: no I/O, no clock of its own.

Order, each time a slot frees:
1. starving waiters: the oldest waiter of any tier that has waited
   `promote_after_seconds`, or a tier's head that `promote_after_passed_over` later
   arrivals have overtaken — up to `promoted_share` of the releases;
2. P1's minimum share: while P1 has waiters it gets `p1_min_share` of the releases;
3. otherwise strict priority, P0 before P1 before P2.
Shares are kept as credit: each release while someone is entitled earns the share, a
whole credit is a release. So P0 keeps at least 1 - promoted_share - p1_min_share of the
releases whenever it waits, however long the overload lasts.
Inside a tier, tenants take turns (round robin), so one tenant's burst cannot fill its
tier's releases; each tenant's own requests stay in arrival order. A waiter whose client
asked to wait less than the tier allows (hurried) goes first when its wait ends before
that of the waiter whose turn it is: earliest deadline first, then arrival.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from sidecar.config.base import Tier
from sidecar.config.schema import QueueConfig
from sidecar.request.policy.cost import Reservation

PRIORITY = (Tier.P0, Tier.P1, Tier.P2)
# Each tier and those that go before it.
_AT_OR_ABOVE = {tier: PRIORITY[: PRIORITY.index(tier) + 1] for tier in PRIORITY}
_EPSILON = 1e-9  # ten releases' worth of 0.1 sum to just under 1


@dataclass(eq=False)
class Waiter:
    tier: Tier
    tenant: str
    enqueued_at: float
    stream: bool = False  # carried to the slot it gets
    reservation: Reservation | None = None  # likewise
    sequence: int = 0  # arrival order, set by the scheduler
    passed_over: int = 0
    promoted: bool = field(default=False)
    deadline: float = math.inf  # when its wait runs out
    hurried: bool = False  # its client asked for a shorter wait than its tier's


class TierQueue:
    """One tier's waiters: per-tenant FIFOs served in turn."""

    def __init__(self) -> None:
        self._tenants: OrderedDict[str, deque[Waiter]] = OrderedDict()
        self.size = 0  # waiters, read on every admission (scheduler.waiting_at_or_above)
        self._hurried = 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[Waiter]:
        for waiters in self._tenants.values():
            yield from waiters

    def add(self, waiter: Waiter) -> None:
        self._tenants.setdefault(waiter.tenant, deque()).append(waiter)
        self.size += 1
        self._hurried += waiter.hurried

    def head(self) -> Waiter | None:
        """The next waiter: the first of the tenant whose turn it is, unless a hurried
        waiter's wait ends before that one's."""
        in_turn = next((waiters[0] for waiters in self._tenants.values()), None)
        if in_turn is None or not self._hurried:
            return in_turn
        hurried = min((w for w in self if w.hurried), key=lambda w: (w.deadline, w.sequence))
        return hurried if hurried.deadline < in_turn.deadline else in_turn

    def oldest(self) -> Waiter | None:
        heads = [waiters[0] for waiters in self._tenants.values()]
        return min(heads, key=lambda w: w.sequence) if heads else None

    def remove(self, waiter: Waiter) -> bool:
        waiters = self._tenants.get(waiter.tenant)
        if not waiters or waiter not in waiters:
            return False
        was_first = waiters[0] is waiter
        waiters.remove(waiter)
        self.size -= 1
        self._hurried -= waiter.hurried
        if not waiters:
            del self._tenants[waiter.tenant]
        elif was_first and next(iter(self._tenants)) == waiter.tenant:
            # The tenant whose turn it was has been served: its turn passes on.
            self._tenants.move_to_end(waiter.tenant)
        return True


class Scheduler:
    def __init__(self, config: QueueConfig | None = None) -> None:
        self.config = config or QueueConfig()
        self._queues = {tier: TierQueue() for tier in Tier}
        self._arrivals = 0
        self._p1_credit = 0.0
        self._promotion_credit = 0.0

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def waiting(self, tier: Tier) -> int:
        return len(self._queues[tier])

    def waiters(self) -> Iterator[Waiter]:
        for queue in self._queues.values():
            yield from queue

    def waiting_at_or_above(self, tier: Tier) -> bool:
        """Whether anyone of this tier or a higher one is waiting (a newcomer queues too).
        Asked on every admission: a loop over the sizes, no generator, no len() calls."""
        queues = self._queues
        for above in _AT_OR_ABOVE[tier]:  # noqa: SIM110 (any() over a generator: a call)
            if queues[above].size:
                return True
        return False

    def add(self, waiter: Waiter) -> None:
        self._arrivals += 1
        waiter.sequence = self._arrivals
        self._queues[waiter.tier].add(waiter)

    def remove(self, waiter: Waiter) -> bool:
        """Take a waiter out (timed out, or its client went away)."""
        removed = self._queues[waiter.tier].remove(waiter)
        if removed and waiter.tier is Tier.P1 and not self._queues[Tier.P1]:
            self._p1_credit = 0.0
        return removed

    def release_next(self, now: float) -> Waiter | None:
        if not len(self):
            return None
        if self._queues[Tier.P1]:
            # Each release while P1 waits earns it a share; a whole one is a release.
            self._p1_credit += self.config.p1_min_share
        starving = self._starving(now)
        if starving is None:
            self._promotion_credit = 0.0
        else:
            self._promotion_credit += self.config.promoted_share
        chosen = None
        if starving is not None and self._promotion_credit >= 1.0 - _EPSILON:
            self._promotion_credit -= 1.0
            starving.promoted = True
            chosen = starving
        chosen = chosen or self._p1_due() or self._by_priority()
        assert chosen is not None
        self._queues[chosen.tier].remove(chosen)
        if chosen.tier is Tier.P1:
            self._p1_credit = max(0.0, self._p1_credit - 1.0) if self._queues[Tier.P1] else 0.0
        for queue in self._queues.values():  # heads that arrived earlier were overtaken
            head = queue.head()
            if head is not None and head.sequence < chosen.sequence:
                head.passed_over += 1
        return chosen

    def _starving(self, now: float) -> Waiter | None:
        starving = []
        for queue in self._queues.values():
            oldest = queue.oldest()
            if oldest is not None and now - oldest.enqueued_at >= self.config.promote_after_seconds:
                starving.append(oldest)
            head = queue.head()
            if head is not None and head.passed_over >= self.config.promote_after_passed_over:
                starving.append(head)
        return min(starving, key=lambda w: w.sequence) if starving else None

    def _p1_due(self) -> Waiter | None:
        if self._p1_credit >= 1.0 - _EPSILON:
            return self._queues[Tier.P1].head()
        return None

    def _by_priority(self) -> Waiter | None:
        for tier in PRIORITY:
            head = self._queues[tier].head()
            if head is not None:
                return head
        return None
