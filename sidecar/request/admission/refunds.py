"""Giving budget back, or taking what an answer owed, after a request's end or when it
was shed after it reserved: in the background, since nobody waits on it."""

from __future__ import annotations

import asyncio
import logging

from sidecar import redis_errors
from sidecar.config.base import Tier
from sidecar.request.limiter.buckets import Limiter
from sidecar.request.policy.cost import Reservation

log = logging.getLogger(__name__)

# Tokens left in each pool's tier bucket after this sidecar's last call (/metrics).
BucketLevels = dict[tuple[str, Tier], float]


class Refunds:
    def __init__(self, limiter: Limiter) -> None:
        self._limiter = limiter
        # The tier buckets' levels as last told: by the budget calls, and by settlements
        # (a debt shows at once, not at the next call).
        self.levels: BucketLevels = {}
        self._settling: set[asyncio.Task[float | None]] = set()

    def give_back(self, reservation: Reservation, tokens: float) -> None:
        """Give `tokens` back to the buckets a request reserved from (negative: take
        them, a debt)."""
        task = asyncio.get_running_loop().create_task(
            self._limiter.settle(tokens, reservation.buckets)
        )
        self._settling.add(task)
        task.add_done_callback(lambda done: self._settled(done, reservation))

    def give_all_back(self, reservation: Reservation | None) -> None:
        """A request shed after it took its budget never ran: its reservation goes back."""
        if reservation is not None:
            self.give_back(reservation, reservation.charge.reserved)

    def _settled(self, task: asyncio.Task[float | None], reservation: Reservation) -> None:
        self._settling.discard(task)
        if task.cancelled():
            return
        if task.exception() is not None:
            redis_errors.note("limiter")
            log.warning("settling a request failed: %s", task.exception())
        elif (level := task.result()) is not None:  # a debt shows at once, not next call
            self.levels[reservation.pool, reservation.tier] = level
