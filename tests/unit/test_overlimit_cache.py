"""The over-limit cache answers only what the shared buckets would answer the same."""

from __future__ import annotations

import pytest

from sidecar.limiter.buckets import BucketSpec, Verdict
from sidecar.limiter.overlimit import OverLimitCache
from sidecar.limiter.resilient import LocalTokenBuckets
from tests.unit.clock import Clock

pytestmark = pytest.mark.asyncio

TIER = BucketSpec("qos:{bucket-p2}:tier", rate=10.0, burst=100.0)
TENANT = BucketSpec("qos:{bucket-p2}:tenant:t", rate=50.0, burst=500.0)


class Counting:
    """Token buckets with the Lua script's arithmetic, counting the calls that reach them."""

    def __init__(self, clock: Clock) -> None:
        self.buckets = LocalTokenBuckets(clock)
        self.calls = 0

    async def acquire(self, cost, buckets) -> Verdict:
        self.calls += 1
        return self.buckets.acquire(cost, buckets)


async def test_a_refused_bucket_is_answered_locally_until_it_refills():
    clock = Clock()
    shared = Counting(clock)
    cache = OverLimitCache(shared, clock)
    assert (await cache.acquire(100, [TIER, TENANT])).allowed  # the burst, spent
    refused = await cache.acquire(40, [TIER, TENANT])
    assert not refused.allowed and refused.retry_after == pytest.approx(4.0)
    clock.now = 1.0
    again = await cache.acquire(60, [TIER, TENANT])  # dearer, before the refill: local
    assert (again.allowed, again.refused, again.retry_after) == (False, 0, pytest.approx(3.0))
    assert (shared.calls, cache.hits) == (2, 1)

    cheaper = await cache.acquire(5, [TIER, TENANT])  # might fit already: Redis decides
    assert cheaper.allowed and shared.calls == 3


async def test_it_never_refuses_what_the_shared_buckets_would_admit():
    clock = Clock()
    cache, reference = OverLimitCache(Counting(clock), clock), Counting(clock)
    costs = [30, 80, 45, 45, 10, 90, 60, 25, 70, 40] * 20
    for step, cost in enumerate(costs):
        clock.now = step * 0.7
        cached = await cache.acquire(cost, [TIER, TENANT])
        exact = await reference.acquire(cost, [TIER, TENANT])
        assert cached.allowed == exact.allowed, (step, cost)
    assert cache.hits > 0


async def test_a_changed_rate_asks_the_shared_buckets_again():
    clock = Clock()
    shared = Counting(clock)
    cache = OverLimitCache(shared, clock)
    await cache.acquire(100, [TIER])
    assert not (await cache.acquire(50, [TIER])).allowed
    faster = BucketSpec(TIER.key, rate=1000.0, burst=100.0)
    await cache.acquire(50, [faster])
    assert (shared.calls, cache.hits) == (3, 0)
