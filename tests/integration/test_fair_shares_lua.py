"""Fair shares between a tier's tenants, kept by the token-bucket script in real Redis."""

from __future__ import annotations

import math

import pytest

from sidecar.budget_layout import fair_share_keys, tenant_bucket_key, tier_bucket_key
from sidecar.request.limiter.buckets import BucketSpec, FairShare
from sidecar.request.limiter.redis_buckets import RedisTokenBuckets

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

RATE, BURST, RESERVE = 1000.0, 1000.0, 500.0
STATE, ACTIVE = fair_share_keys("p1")


def tier(
    tenant: str, weight: float = 1.0, active_seconds: float = 5.0, window: float = 0.5
) -> BucketSpec:
    """P1's bucket of 1 000 tokens at 1 000 a second, asked by `tenant`; a tenant's share
    of the tier over the window (0.5 s: 500 tokens) is split by weight."""
    fair = FairShare(STATE, ACTIVE, tenant, weight, window, active_seconds, RESERVE)
    return BucketSpec(tier_bucket_key("p1"), RATE, BURST, fair)


async def entry(aredis, tenant: str) -> tuple[float, float, float]:
    """The tenant's served and refused tokens, and when (Redis time, ms) they were kept."""
    served, refused, at, _ = (await aredis.hget(STATE, f"t:{tenant}")).decode().split(",")
    return float(served), float(refused), float(at)


def decayed(tokens: float, since_ms: float, at_ms: float, window: float = 0.5) -> float:
    return tokens * math.exp(-(at_ms - since_ms) / (window * 1000))


async def test_alone_a_tenant_may_take_the_whole_bucket(aredis):
    buckets = RedisTokenBuckets(aredis)
    for _ in range(9):
        assert (await buckets.acquire(100, [tier("a")])).allowed
    last = await buckets.acquire(100, [tier("a")])
    assert last.allowed, last
    assert last.remaining < 100  # down to the bottom, past the reserve


async def test_over_its_share_a_tenant_stops_at_the_reserve_kept_for_the_others(aredis):
    buckets = RedisTokenBuckets(aredis)
    assert (await buckets.acquire(10, [tier("b")])).allowed  # b is active: two tenants
    taken = 0
    while (verdict := await buckets.acquire(100, [tier("a")])).allowed:
        taken += 100
        assert taken <= BURST
    # Served more than the tier's tenants on average, a may take only what lies above the
    # reserve: 490 of the 990 left (the refill may let one more in).
    assert 400 <= taken <= 500, taken
    assert verdict.over_fair_share and verdict.refused == tier("a")
    assert verdict.remaining >= RESERVE - 100 - 1
    # ~0.1 s: what a lacks above the reserve, at the tier's rate.
    assert 0 < verdict.retry_after <= 0.1 + 0.01
    # b, served less than the average, takes from the reserve until it is past it too
    # (each side counting half the ask): 10, 110, 210 and 310 served, +50, against the
    # average's 230, 280, 330 and 380; then 460 against 430.
    for _ in range(4):
        answer = await buckets.acquire(100, [tier("b")])
        assert answer.allowed and answer.remaining < RESERVE
    assert (await buckets.acquire(100, [tier("b")])).over_fair_share


async def test_weights_set_the_shares(aredis):
    buckets = RedisTokenBuckets(aredis)
    taken = {"heavy": 0, "light": 0}
    weights = {"heavy": 3, "light": 1}
    light_kept_out = False
    seconds, microseconds = await aredis.time()
    started_ms = seconds * 1000 + microseconds / 1000
    for _ in range(40):  # they ask in turn until the bucket is dry
        for name, weight in weights.items():
            verdict = await buckets.acquire(50, [tier(name, weight=weight)])
            taken[name] += 50 if verdict.allowed else 0
            light_kept_out |= name == "light" and verdict.over_fair_share
    # Above the reserve they shared alike; below it, light was served more per unit of
    # weight than the average and kept out, heavy took the rest: 3 to 1 all told.
    assert light_kept_out
    assert 2.5 <= taken["heavy"] / taken["light"] <= 3.5, taken
    assert sum(taken.values()) >= BURST - 50
    state = await aredis.hgetall(STATE)
    assert float(state[b"#weights"]) == 4.0
    # What they were served, decayed over the half-second window as the calls went on:
    # at most as much as if all of it had been served when they began.
    least = decayed(sum(taken.values()), started_ms, float(state[b"#at"]))
    assert least <= float(state[b"#served"]) <= sum(taken.values())


async def test_quiet_tenants_leave_the_sum_of_weights(aredis):
    buckets = RedisTokenBuckets(aredis)
    await buckets.acquire(1, [tier("gone", active_seconds=0.05)])
    # Make "gone" look quiet for 10 s, and the last sweep long ago, instead of sleeping.
    ((name, score),) = await aredis.zrange(ACTIVE, 0, -1, withscores=True)
    await aredis.zadd(ACTIVE, {name: score - 10_000})
    served, asked, at, weight = (await aredis.hget(STATE, "t:gone")).decode().split(",")
    old = float(at) - 10_000
    await aredis.hset(STATE, mapping={"t:gone": f"{served},{asked},{old},{weight}", "#swept": 0})
    verdict = await buckets.acquire(900, [tier("stays", active_seconds=0.05)])
    assert verdict.allowed  # alone again: no reserve kept for a tenant gone quiet
    state = await aredis.hgetall(STATE)
    assert b"t:gone" not in state and float(state[b"#weights"]) == 1.0
    assert await aredis.zrange(ACTIVE, 0, -1) == [b"stays"]


async def test_a_tenant_refused_by_its_own_rate_does_not_contend_for_the_tier(aredis):
    buckets = RedisTokenBuckets(aredis)
    own = BucketSpec(tenant_bucket_key("p1", "capped"), rate=1, burst=10)
    verdict = await buckets.acquire(50, [tier("capped"), own])
    assert not verdict.allowed and verdict.refused == own  # cost above its own burst
    verdict = await buckets.acquire(5, [tier("capped"), own])
    assert verdict.allowed
    assert not (await buckets.acquire(8, [tier("capped"), own])).allowed  # its own rate
    # It asked and was served once: active. Another tenant is then not alone...
    assert await aredis.zrange(ACTIVE, 0, -1) == [b"capped"]
    # ...but a tenant that only ever hit its own limit would not be.
    await aredis.delete(STATE, ACTIVE)
    assert not (await buckets.acquire(8, [tier("capped2"), own])).allowed
    assert await aredis.exists(ACTIVE) == 0


async def test_without_fairness_the_script_answers_as_before(aredis):
    buckets = RedisTokenBuckets(aredis)
    plain = BucketSpec(tier_bucket_key("p1"), RATE, BURST)
    for _ in range(10):
        assert (await buckets.acquire(100, [plain])).allowed
    # The state shares the tier bucket's hash: no fair-share field, no active tenant.
    assert not [f for f in await aredis.hkeys(STATE) if f.startswith((b"#", b"t:"))]
    assert await aredis.exists(ACTIVE) == 0


async def test_a_settlement_corrects_what_the_tenant_was_served(aredis):
    buckets = RedisTokenBuckets(aredis)
    assert (await buckets.acquire(400, [tier("a")])).allowed  # reserved its answer
    _, _, reserved_at = await entry(aredis, "a")
    total_at = float(await aredis.hget(STATE, "#at"))  # the same time, fewer digits kept
    await buckets.settle(300, [tier("a")])  # the answer was shorter: 300 given back
    served, _, settled_at = await entry(aredis, "a")
    # The 400 decayed over the window until the settlement (on Redis's clock), less 300.
    assert served == pytest.approx(decayed(400, reserved_at, settled_at) - 300, abs=0.01)
    total = float(await aredis.hget(STATE, "#served"))
    assert total == pytest.approx(decayed(400, total_at, settled_at) - 300, abs=0.01)
    plain = BucketSpec(tier_bucket_key("p1"), RATE, BURST)
    assert await buckets.settle(-50, [plain]) is not None  # without fairness, as before


async def test_what_the_tier_refused_a_tenant_is_kept_as_its_want_of_more(aredis):
    buckets = RedisTokenBuckets(aredis)
    assert (await buckets.acquire(900, [tier("a")])).allowed
    _, _, served_at = await entry(aredis, "a")
    assert not (await buckets.acquire(400, [tier("a")])).allowed  # the tier's bucket
    served, refused, refused_at = await entry(aredis, "a")
    assert served == pytest.approx(decayed(900, served_at, refused_at), abs=0.01)
    assert refused == pytest.approx(400, abs=0.01)  # nothing refused before it


async def test_a_sweep_keeps_a_tenant_that_asked_since_its_score_was_set(aredis):
    buckets = RedisTokenBuckets(aredis)
    await buckets.acquire(1, [tier("busy", active_seconds=1)])
    ((name, score),) = await aredis.zrange(ACTIVE, 0, -1, withscores=True)
    await aredis.zadd(ACTIVE, {name: score - 10_000})  # first seen long ago...
    await aredis.hset(STATE, "#swept", 0)  # ...and a sweep due
    await buckets.acquire(1, [tier("other", active_seconds=1)])
    scores = dict(await aredis.zrange(ACTIVE, 0, -1, withscores=True))
    assert scores[b"busy"] == pytest.approx(score)  # its last ask, not quiet
    assert float(await aredis.hget(STATE, "#weights")) == 2.0
