"""A local memory of empty buckets, so a refused tier costs no Redis call.

When the shared buckets refuse a request, the answer says which bucket refused and when
it will hold the request's cost again: so how many tokens it held at most. A bucket only
gains tokens by refilling, at its rate, whatever any sidecar does; from then on it holds
at most that level plus its refill since. A request costing more than that bound is
refused here, without Redis, whatever its cost compared with the first; anything within
the bound, or any bucket whose rate or burst changed since, still asks Redis. Nothing is
refused that the shared buckets would admit (the bound is taken from before the call and
allows for the script's rounding, so it errs high).

A refusal for being over a fair share of the tier (the bucket's reserve is kept for the
tier's other tenants) bounds what that tenant may take, not the bucket: it is kept for
that tenant alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sidecar.budget_layout import AdmittedLoad
from sidecar.request.limiter.buckets import Alternative, BucketSpec, Limiter, Verdict

# The script rounds a wait up to the next millisecond: the level it implies is low by up
# to a millisecond of refill, so the bound adds one.
ROUNDING_SECONDS = 0.001


class OverLimitCache:
    def __init__(self, inner: Limiter, clock: Callable[[], float] = time.monotonic) -> None:
        self._inner = inner
        self._clock = clock
        # (key, rate, burst, tenant or "") → (at, level): the bucket held at most `level`
        # tokens at `at` (for that tenant: above the reserve kept for the others).
        self._bounds: dict[tuple[str, float, float, str], tuple[float, float]] = {}
        self.hits = 0

    async def acquire(
        self,
        cost: float,
        buckets: Sequence[BucketSpec],
        load: AdmittedLoad | None = None,
        otherwise: Alternative | None = None,
    ) -> Verdict:
        now = self._clock()
        for bucket in buckets if self._bounds else ():  # none known: nothing to look up
            if cost > bucket.burst:  # beyond the burst: Redis says never
                continue
            for key, over_share in _keys(bucket):
                known = self._bounds.get(key)
                if known is None:
                    continue
                most = _at_most(known, bucket.rate, now)
                if cost > most:
                    self.hits += 1
                    return Verdict(
                        False,
                        refused=bucket,
                        retry_after=(cost - most) / bucket.rate,
                        over_fair_share=over_share,
                    )
        verdict = await self._inner.acquire(cost, buckets, load, otherwise)
        if verdict.elsewhere:
            return verdict  # the other buckets': nothing learnt of the first
        if not verdict.allowed and verdict.retry_after and verdict.refused is not None:
            bucket = verdict.refused
            waited = max(0.0, verdict.retry_after - ROUNDING_SECONDS)
            key = _keys(bucket)[-1 if verdict.over_fair_share else 0][0]
            self._bounds[key] = (now, cost - waited * bucket.rate)
        if len(self._bounds) > 10_000:  # tenants come and go: drop the refilled ones
            self._bounds = {
                key: bound
                for key, bound in self._bounds.items()
                if _at_most(bound, key[1], now) < key[2]
            }
        return verdict

    async def settle(self, delta: float, buckets: Sequence[BucketSpec]) -> float | None:
        level = await self._inner.settle(delta, buckets)
        if delta > 0:  # given back: the buckets may hold more than any bound kept here
            for bucket in buckets:
                for key, _ in _keys(bucket):
                    self._bounds.pop(key, None)
        return level


def _keys(bucket: BucketSpec) -> list[tuple[tuple[str, float, float, str], bool]]:
    """The bounds that apply to a call on `bucket`: the bucket's own and, in a fairly
    shared tier, the asking tenant's (marked True)."""
    keys = [((bucket.key, bucket.rate, bucket.burst, ""), False)]
    if bucket.fair is not None:
        keys.append(((bucket.key, bucket.rate, bucket.burst, bucket.fair.tenant), True))
    return keys


def _at_most(bound: tuple[float, float], rate: float, now: float) -> float:
    """The most tokens a bucket can hold now: its bound then, plus its refill since."""
    at, level = bound
    return level + (now - at) * rate
