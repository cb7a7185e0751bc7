"""A local memory of empty buckets, so a refused tier costs no Redis call.

When the shared buckets refuse a request, the answer says which bucket refused and when
it will hold the request's cost again: a bucket only gains tokens by refilling, so until
then it refuses every request costing as much or more, whatever any sidecar does. Those
are answered here, without Redis, until that moment; anything cheaper, or any bucket
whose rate or burst changed since, still asks Redis. Nothing is refused that the shared
buckets would admit (the moment is taken from before the call, so it errs early).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sidecar.limiter.buckets import BucketSpec, Limiter, Verdict


class OverLimitCache:
    def __init__(self, inner: Limiter, clock: Callable[[], float] = time.monotonic) -> None:
        self._inner = inner
        self._clock = clock
        # (key, rate, burst) → (until, cost): fewer than `cost` tokens until `until`.
        self._empty: dict[tuple[str, float, float], tuple[float, float]] = {}
        self.hits = 0

    async def acquire(self, cost: float, buckets: Sequence[BucketSpec]) -> Verdict:
        now = self._clock()
        for index, bucket in enumerate(buckets):
            known = self._empty.get((bucket.key, bucket.rate, bucket.burst))
            if known is not None and now < known[0] and cost >= known[1]:
                self.hits += 1
                return Verdict(False, refused=index, retry_after=known[0] - now)
        verdict = await self._inner.acquire(cost, buckets)
        if not verdict.allowed and verdict.retry_after and verdict.refused is not None:
            bucket = buckets[verdict.refused]
            self._empty[(bucket.key, bucket.rate, bucket.burst)] = (now + verdict.retry_after, cost)
        if len(self._empty) > 10_000:  # tenants come and go: drop what has expired
            self._empty = {k: v for k, v in self._empty.items() if v[0] > now}
        return verdict
