"""Requests waiting here for their bucket to refill, within their tier's max wait.

A newcomer waits behind those already waiting for its bucket (`ahead`), so it is held
only if the bucket can serve them all in time. One waiter of a bucket asks Redis at a
time: the others, finding it asking, look again a little later, in no set order (so a
burst of waiters is not a burst of Redis calls each time the bucket refills, and who
comes next is left to chance, as it was when all of them asked).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from sidecar.request.limiter.buckets import Verdict

# How soon a waiter looks again when another waiter of its bucket asks Redis.
ASKING_AGAIN_SECONDS = (0.002, 0.010)


class BudgetWaiters:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        # Budget tokens the waiters of each bucket (or tenant of a fair tier) wait for.
        self._waiting: dict[str, float] = {}
        # Per bucket, held while one of its waiters asks Redis.
        self._asking: dict[str, asyncio.Lock] = {}

    def ahead(self, key: str, rate: float) -> float:
        """Seconds of the bucket's refill that those already waiting for it need."""
        return self._waiting.get(key, 0.0) / rate

    async def wait(
        self,
        cost: float,
        key: str,
        verdict: Verdict,
        deadline: float,
        ask: Callable[[], Awaitable[Verdict]],
    ) -> Verdict:
        """Ask again (`ask`: one budget call) as the bucket refills, until it allows or
        the deadline would pass: the last verdict, allowed or not."""
        self._waiting[key] = self._waiting.get(key, 0.0) + cost
        asking = self._asking.setdefault(key, asyncio.Lock())
        delay = verdict.retry_after or 0.0
        try:
            while True:
                await asyncio.sleep(delay)
                if asking.locked():
                    delay = random.uniform(*ASKING_AGAIN_SECONDS)
                    if self._clock() + delay > deadline:
                        return verdict
                    continue
                async with asking:
                    verdict = await ask()
                if verdict.allowed:
                    return verdict
                if verdict.retry_after is None or self._clock() + verdict.retry_after > deadline:
                    return verdict
                delay = verdict.retry_after
        finally:
            self._waiting[key] -= cost
