"""The over-limit cache answers only what the shared buckets would answer the same."""

from __future__ import annotations

import pytest

from sidecar.request.limiter.buckets import BucketSpec, FairShare, Verdict
from sidecar.request.limiter.overlimit import OverLimitCache
from sidecar.request.limiter.resilient import LocalTokenBuckets
from tests.unit.clock import Clock

pytestmark = pytest.mark.asyncio

TIER = BucketSpec("qos:{bucket-p2}:tier", rate=10.0, burst=100.0)
TENANT = BucketSpec("qos:{bucket-p2}:tenant:t", rate=50.0, burst=500.0)


class Counting:
    """Token buckets with the Lua script's arithmetic, counting the calls that reach them."""

    def __init__(self, clock: Clock) -> None:
        self.buckets = LocalTokenBuckets(clock)
        self.calls = 0

    async def acquire(self, cost, buckets, load=None, otherwise=None) -> Verdict:
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
    # The bucket held nothing at 0 s, so at most 10 tokens now (and a millisecond's more).
    again = await cache.acquire(60, [TIER, TENANT])
    assert (again.allowed, again.refused) == (False, TIER)
    assert again.retry_after == pytest.approx(5.0, abs=0.002)  # when 60 may fit
    cheaper = await cache.acquire(20, [TIER, TENANT])  # cheaper than the refused 40: local too
    assert not cheaper.allowed and cheaper.retry_after == pytest.approx(1.0, abs=0.002)
    assert (shared.calls, cache.hits) == (2, 2)

    within = await cache.acquire(5, [TIER, TENANT])  # might fit already: Redis decides
    assert within.allowed and shared.calls == 3


@pytest.mark.parametrize("spacing", [0.7, 0.05])
async def test_it_never_refuses_what_the_shared_buckets_would_admit(spacing):
    clock = Clock()
    cache, reference = OverLimitCache(Counting(clock), clock), Counting(clock)
    costs = [30, 80, 45, 45, 10, 90, 60, 25, 70, 40, 9, 11, 100, 101] * 20
    for step, cost in enumerate(costs):
        clock.now = step * spacing
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


class OverShare:
    """A tier whose reserve is kept for others: each call refused as over a fair share,
    lacking what `lacking` says (in tokens, at the bucket's rate)."""

    def __init__(self, lacking: float) -> None:
        self.lacking = lacking
        self.calls = 0

    async def acquire(self, cost, buckets, load=None, otherwise=None) -> Verdict:
        self.calls += 1
        rate = buckets[0].rate
        lacking = self.lacking / rate
        return Verdict(False, refused=buckets[0], retry_after=lacking, over_fair_share=True)


def fair_tier(tenant: str) -> BucketSpec:
    share = FairShare("qos:{bucket-p2}:fair", "qos:{bucket-p2}:fair-active", tenant, 1, 2, 5, 50)
    return BucketSpec(TIER.key, TIER.rate, TIER.burst, share)


async def test_a_fair_share_refusal_is_remembered_for_its_tenant_only():
    clock = Clock()
    shared = OverShare(lacking=30)
    cache = OverLimitCache(shared, clock)
    first = await cache.acquire(40, [fair_tier("flood")])
    assert first.over_fair_share and shared.calls == 1
    again = await cache.acquire(40, [fair_tier("flood")])  # the same tenant: answered here
    assert not again.allowed and again.over_fair_share and shared.calls == 1
    # Another tenant of the tier may be under its share: the shared buckets decide.
    await cache.acquire(40, [fair_tier("light")])
    assert shared.calls == 2
