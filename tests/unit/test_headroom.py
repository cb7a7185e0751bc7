"""Admissions from a bucket's known headroom: only where Redis's answer is known, each
sidecar within its share, every one charged behind, summed."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.budget_layout import AdmittedLoad
from sidecar.request.limiter.buckets import Alternative, BucketSpec, Charged, FairShare, Verdict
from sidecar.request.limiter.headroom import CONTENDED_SECONDS, MAX_AGE_SECONDS, Headroom
from sidecar.request.limiter.resilient import LocalTokenBuckets
from tests.unit.clock import Clock

pytestmark = pytest.mark.asyncio

TIER = BucketSpec("qos:{bucket-p1}:tier", rate=100.0, burst=1000.0)
TENANT = BucketSpec("qos:{bucket-p1}:tenant:t", rate=100.0, burst=1000.0)


class Shared:
    """The shared buckets' arithmetic, counting what reaches them."""

    def __init__(self, clock: Clock) -> None:
        self.buckets = LocalTokenBuckets(clock)
        self.asked = 0
        self.charges: list[tuple[float, BucketSpec, AdmittedLoad | None, int]] = []
        self.charged = asyncio.Event()
        self.fails = False
        self.answers: asyncio.Event | None = None  # set: charges answer when it is set

    async def acquire(self, cost, buckets, load=None, otherwise=None) -> Verdict:
        self.asked += 1
        return self.buckets.acquire(cost, buckets)

    async def settle(self, delta, buckets) -> float | None:
        return self.buckets.settle(delta, buckets)

    async def charge(self, tokens, bucket, load, admissions) -> Charged:
        if self.fails:
            raise ConnectionError("gone")
        self.charges.append((tokens, bucket, load, admissions))
        self.charged.set()
        level = self.buckets.settle(-tokens, [bucket])
        assert level is not None
        if self.answers is not None:
            await self.answers.wait()
        return Charged(level, 7 if load is not None else 0)


def headroom(shared: Shared, clock: Clock, alive: int = 1, interval: float = 60.0) -> Headroom:
    return Headroom(shared, lambda: alive, interval, clock)


async def test_admits_from_what_redis_said_and_charges_behind_summed():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock, interval=0.01)
    assert (await limiter.acquire(100, [TIER])).allowed  # nothing known: asked
    assert shared.asked == 1
    verdicts = [await limiter.acquire(100, [TIER]) for _ in range(4)]
    assert all(v.allowed for v in verdicts) and shared.asked == 1
    assert [v.remaining for v in verdicts] == [800, 700, 600, 500]
    await asyncio.wait_for(shared.charged.wait(), 5)
    assert [(tokens, admissions) for tokens, _, _, admissions in shared.charges] == [(400, 4)]
    assert limiter.admitted == 4
    # Charged: the shared bucket holds what was admitted, here and behind.
    assert shared.buckets.acquire(0, [TIER]).remaining == 500


async def test_stops_at_half_the_burst_and_asks_redis_from_there():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock)
    await limiter.acquire(100, [TIER])  # 900 left, read
    assert all([(await limiter.acquire(100, [TIER])).allowed for _ in range(4)])
    assert shared.asked == 1  # 500 left: the reserve
    assert (await limiter.acquire(1, [TIER])).allowed and shared.asked == 2


async def test_each_sidecar_takes_its_share_of_the_headroom():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock, alive=4)
    await limiter.acquire(200, [TIER])  # 800 read: 300 above the reserve, 75 each
    assert (await limiter.acquire(75, [TIER])).allowed and shared.asked == 1
    await limiter.acquire(1, [TIER])
    assert shared.asked == 2


async def test_an_old_reading_is_not_admitted_on():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock)
    await limiter.acquire(1, [TIER])
    clock.now = MAX_AGE_SECONDS + 0.01
    await limiter.acquire(1, [TIER])
    assert shared.asked == 2


async def test_a_tenants_own_budget_or_another_pools_offer_asks_redis():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock)
    await limiter.acquire(1, [TIER])
    await limiter.acquire(1, [TIER, TENANT])
    await limiter.acquire(1, [TIER], otherwise=Alternative(1, [TENANT], None, 0.0))
    assert shared.asked == 3


async def test_a_fairly_shared_tier_keeps_its_fair_shares_reserve():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock)
    fair = FairShare("state", "active", "acme", 1.0, 10.0, 2.0, reserve=700.0)
    acme = BucketSpec(TIER.key, TIER.rate, TIER.burst, fair)
    await limiter.acquire(1, [acme])  # 999 read
    assert (await limiter.acquire(299, [acme])).allowed and shared.asked == 1
    await limiter.acquire(1, [acme])  # 700 left: the reserve, more than half the burst
    assert shared.asked == 2
    await limiter.stop()
    assert [(tokens, bucket) for tokens, bucket, *_ in shared.charges] == [(299, acme)]


async def test_a_charge_records_the_admissions_and_tells_when():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock)
    await limiter.acquire(1, [TIER])
    one = await limiter.acquire(10, [TIER], AdmittedLoad("p1", "default", 3))
    other = await limiter.acquire(10, [TIER], AdmittedLoad("p1", "default", 4))
    assert one.recorded_later is other.recorded_later is not None
    told: list[int] = []
    one.recorded_later.then(told.append)
    await limiter.stop()  # what was admitted is charged before the sidecar goes
    assert shared.charges == [(20, TIER, AdmittedLoad("p1", "default", 7), 2)]
    assert told == [7]


async def test_a_lost_charge_is_counted_and_frees_the_headroom():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock)
    await limiter.acquire(100, [TIER])
    behind = await limiter.acquire(400, [TIER])
    assert behind.allowed and behind.recorded_later is not None
    told: list[int] = []
    behind.recorded_later.then(told.append)
    shared.fails = True
    await limiter.stop()
    assert limiter.charges_lost == 1
    assert told == [0]  # recorded nowhere: its projection counts it until a report
    assert (await limiter.acquire(400, [TIER])).allowed and shared.asked == 1


async def test_what_was_admitted_here_is_charged_before_redis_is_asked():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock)
    await limiter.acquire(100, [TIER])
    await limiter.acquire(300, [TIER])  # 600 left, but Redis does not know it yet
    verdict = await limiter.acquire(200, [TIER])  # beyond the headroom: asked
    assert [tokens for tokens, *_ in shared.charges] == [300]
    assert shared.asked == 2 and verdict.remaining == 400  # on the level it has all of


async def test_a_charge_on_its_way_is_answered_before_redis_is_asked():
    # Else Redis, on another connection, might answer on a level without it.
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock, interval=0.001)
    await limiter.acquire(100, [TIER])
    shared.answers = asyncio.Event()
    await limiter.acquire(300, [TIER])
    await shared.charged.wait()  # sent by the timer; its answer is on its way
    asking = asyncio.create_task(limiter.acquire(200, [TIER]))  # beyond the headroom
    done, _ = await asyncio.wait([asking], timeout=0.05)
    assert not done and shared.asked == 1
    shared.answers.set()
    verdict = await asking
    assert shared.asked == 2 and verdict.remaining == 400


async def test_a_bucket_that_refused_lately_is_left_to_redis():
    clock = Clock()
    shared = Shared(clock)
    limiter = headroom(shared, clock)
    await limiter.acquire(900, [TIER])
    assert not (await limiter.acquire(200, [TIER])).allowed  # 100 left: refused
    clock.now = 0.5
    assert await limiter.settle(900, [TIER]) == 1000  # given back: full again
    await limiter.acquire(1, [TIER])
    assert shared.asked == 3  # contended a moment ago: Redis decides
    clock.now = CONTENDED_SECONDS + 0.01
    await limiter.settle(0, [TIER])  # a fresh reading
    await limiter.acquire(1, [TIER])
    assert shared.asked == 3
