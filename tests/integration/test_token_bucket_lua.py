"""The token-bucket Lua script against a real redis-server."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.budget_layout import SLOT_MS, AdmittedLoad, tenant_bucket_key, tier_bucket_key
from sidecar.loops.overload.admission_records import AdmissionRecords
from sidecar.request.limiter.buckets import Alternative, BucketSpec, Owner
from sidecar.request.limiter.redis_buckets import SCRIPT, RedisTokenBuckets

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

TIER = BucketSpec(tier_bucket_key("p1"), rate=1000, burst=500)
TENANT = BucketSpec(tenant_bucket_key("p1", "acme"), rate=100, burst=200, owner=Owner.TENANT)


async def server_ms(client) -> float:
    seconds, micros = await client.time()
    return seconds * 1000 + micros / 1000


async def set_state(client, key: str, tokens: float, ts_ms: float) -> None:
    await client.hset(key, mapping={"tokens": tokens, "ts": ts_ms})


async def tokens(client, key: str) -> float:
    return float(await client.hget(key, "tokens"))


async def test_a_missing_bucket_is_full_and_drains(aredis):
    buckets = RedisTokenBuckets(aredis)
    first = await buckets.acquire(500, [TIER])
    assert first.allowed and first.remaining == pytest.approx(0, abs=1)
    second = await buckets.acquire(100, [TIER])
    assert not second.allowed and second.refused == TIER
    # 100 tokens at 1000/s: about 100 ms, less what refilled since the first call.
    assert 0.05 < second.retry_after <= 0.1


async def test_refill_follows_the_redis_clock(aredis):
    buckets = RedisTokenBuckets(aredis)
    await set_state(aredis, TIER.key, 0, await server_ms(aredis) - 200)
    verdict = await buckets.acquire(150, [TIER])
    assert verdict.allowed
    # 200 ms at 1000 tokens/s refilled 200; 150 taken; a few ms may have passed since.
    assert 50 <= verdict.remaining < 60
    # A timestamp ahead of the server's clock refills nothing (no negative elapsed).
    await set_state(aredis, TIER.key, 10, await server_ms(aredis) + 10_000)
    assert not (await buckets.acquire(20, [TIER])).allowed
    assert await tokens(aredis, TIER.key) == 10  # a refusal writes nothing


async def test_refill_stops_at_the_burst(aredis):
    buckets = RedisTokenBuckets(aredis)
    await set_state(aredis, TIER.key, 0, await server_ms(aredis) - 3_600_000)
    verdict = await buckets.acquire(1, [TIER])
    assert verdict.remaining == pytest.approx(499)


async def test_all_or_nothing_across_tier_and_tenant(aredis):
    buckets = RedisTokenBuckets(aredis)
    now = await server_ms(aredis)
    await set_state(aredis, TIER.key, 400, now)
    await set_state(aredis, TENANT.key, 50, now)
    verdict = await buckets.acquire(100, [TIER, TENANT])
    assert not verdict.allowed and verdict.refused == TENANT
    # The tenant lacks ~50 tokens at 100/s: about half a second.
    assert 0.45 <= verdict.retry_after <= 0.5
    assert await tokens(aredis, TIER.key) == 400  # the tier bucket was not charged
    assert (await buckets.acquire(40, [TIER, TENANT])).allowed
    # 40 taken from each; what refilled meanwhile depends on how slow this machine was.
    elapsed = (await server_ms(aredis) - now) / 1000
    assert 360 <= await tokens(aredis, TIER.key) <= 360 + TIER.rate * elapsed
    assert 10 <= await tokens(aredis, TENANT.key) <= 10 + TENANT.rate * elapsed


async def test_the_longest_wait_names_the_refusing_bucket(aredis):
    buckets = RedisTokenBuckets(aredis)
    now = await server_ms(aredis)
    await set_state(aredis, TIER.key, 0, now)  # 100 tokens short: 0.1 s at 1000/s
    await set_state(aredis, TENANT.key, 150, now)  # enough
    verdict = await buckets.acquire(100, [TIER, TENANT])
    assert verdict.refused == TIER and verdict.retry_after == pytest.approx(0.1, abs=0.01)


async def test_every_key_expires_once_it_would_be_full_again(aredis):
    buckets = RedisTokenBuckets(aredis)
    assert (await buckets.acquire(150, [TIER, TENANT])).allowed
    # Tier: 150 tokens short of full at 1000/s → 150 ms, plus 1 s of slack.
    assert 1100 <= await aredis.pttl(TIER.key) <= 1150
    # Tenant: 150 short at 100/s → 1.5 s, plus 1 s.
    assert 2450 <= await aredis.pttl(TENANT.key) <= 2500


async def test_a_cost_above_the_burst_is_refused_at_once(aredis):
    verdict = await RedisTokenBuckets(aredis).acquire(201, [TIER, TENANT])
    assert not verdict.allowed and verdict.refused == TENANT and verdict.retry_after is None
    assert await aredis.exists(TIER.key, TENANT.key) == 0  # Redis was not asked
    # The script refuses it too, should a caller skip the check.
    raw = await aredis.eval(SCRIPT, 1, TIER.key, 501, TIER.rate, TIER.burst, TIER.max_debt)
    assert raw[:3] == [0, 1, -1]


async def test_script_survives_a_script_flush(aredis):
    buckets = RedisTokenBuckets(aredis)
    assert (await buckets.acquire(1, [TIER])).allowed
    await aredis.script_flush()
    assert (await buckets.acquire(1, [TIER])).allowed
    assert await tokens(aredis, TIER.key) == pytest.approx(498, abs=1)


async def test_admissions_are_recorded_with_their_budget_call_and_read_back(aredis):
    buckets = RedisTokenBuckets(aredis)
    records = AdmissionRecords(aredis, lambda: ("default", "pool-b"))
    p1 = AdmittedLoad("p1", "default", blocks=3)
    first = await buckets.acquire(100, [TIER], p1)
    now_us = await server_ms(aredis) * 1000
    assert now_us - 1_000_000 <= first.recorded_us <= now_us  # Redis's time, in µs
    assert (await buckets.acquire(100, [TIER, TENANT], p1)).recorded_us >= first.recorded_us
    assert (await buckets.acquire(100, [TIER])).recorded_us == 0  # nothing asked
    # Refused: not recorded, unless the tier is admitted over its budget anyway.
    pool_b = BucketSpec(tier_bucket_key("p1", "pool-b"), rate=10, burst=10)
    admitted = await buckets.acquire(10, [pool_b, TENANT], AdmittedLoad("p1", "pool-b", 9))
    assert admitted.allowed and admitted.recorded_us
    refused = await buckets.acquire(10, [pool_b], AdmittedLoad("p1", "pool-b", blocks=9))
    assert not refused.allowed and not refused.recorded_us
    over = await buckets.acquire(10, [pool_b], AdmittedLoad("p1", "pool-b", 9, True))
    assert not over.allowed and over.recorded_us
    p2 = BucketSpec(tier_bucket_key("p2"), 10, 10)
    await buckets.acquire(1, [p2], AdmittedLoad("p2", "default", blocks=3))

    read = await records.recent(newer_than=5.0)
    assert read.holds("p1", first.recorded_us)  # recorded before the read
    assert not read.holds("p1", read.read_us["p1"]) and not read.holds("p1", 0)
    # Recorded right after the read (within its millisecond, often): not in it.
    after = await buckets.acquire(1, [TIER], p1)
    assert not read.holds("p1", after.recorded_us)
    recent = read.by_pool
    assert set(recent) == {"default", "pool-b"}
    assert sum(r.blocks for r in recent["default"]) == 3 * 3  # p1 twice, p2 once
    assert sum(r.requests for r in recent["default"]) == 3
    assert sum(r.blocks for r in recent["pool-b"]) == 9 * 2  # admitted, and over budget
    assert all(0 <= r.age_seconds < 5 for r in recent["default"])
    # Nothing is read once its slots have ended longer ago than asked for.
    for _ in range(200):  # polling: the slot ends on Redis's clock
        if not (await records.recent(newer_than=SLOT_MS / 1000)).by_pool:
            break
        await asyncio.sleep(SLOT_MS / 1000)
    else:
        pytest.fail("slots that ended longer ago than asked for are still read")


async def test_a_load_is_recorded_in_its_tiers_bucket_of_its_pool_only(aredis):
    with pytest.raises(ValueError, match="recorded in its tier's bucket"):
        await RedisTokenBuckets(aredis).acquire(1, [TIER], AdmittedLoad("p1", "pool-b", 1))
    assert await aredis.exists(TIER.key) == 0  # Redis was not asked


async def test_the_bucket_drops_its_recorded_slots_once_they_are_older_than_kept(aredis):
    key = TIER.key

    async def record() -> int:
        args = [1, TIER.rate, TIER.burst, TIER.max_debt, "record", 2, "default", SLOT_MS]
        reply = await aredis.eval(SCRIPT, 1, key, *args, SLOT_MS, 0)
        return int(reply[4]) // 1000 // SLOT_MS  # the slot, on Redis's clock (µs)

    first = await record()
    second = await record()
    assert second >= first
    # The newest slot is there (an older one may be gone already: one slot is kept).
    packed = int(await aredis.hget(key, f"r|{second}"))
    assert packed % 2**20 >= 1 and packed // 2**20 == 2 * (packed % 2**20)
    ahead_ms = (first + 2) * SLOT_MS - await server_ms(aredis)
    await asyncio.sleep(max(ahead_ms, 0) / 1000)  # time itself: slots pass on Redis's clock
    later = await record()
    assert later >= first + 2
    slots = sorted(f.decode() for f in await aredis.hkeys(key) if f.startswith(b"r|"))
    assert slots == [f"r|{later}"]  # kept one slot: the older ones went
    assert int(await aredis.hget(key, "#r")) == later
    assert await aredis.pttl(key) >= SLOT_MS  # the hash lives as long as its records


SMALL = BucketSpec(tier_bucket_key("p1", "small"), rate=1000, burst=500)


async def test_another_pools_buckets_are_taken_in_the_same_call_only_for_a_shed(aredis):
    buckets = RedisTokenBuckets(aredis)
    otherwise = Alternative(100, [SMALL, TENANT], load=None, beyond=0.1)

    async def home(tier_tokens: float) -> None:
        now = await server_ms(aredis)
        await set_state(aredis, TIER.key, tier_tokens, now)
        await set_state(aredis, TENANT.key, 200, now)

    # Room at home: the other set is not even tried.
    await home(500)
    here = await buckets.acquire(150, [TIER, TENANT], otherwise=otherwise)
    assert here.allowed and here.elsewhere is None
    assert await aredis.exists(SMALL.key) == 0
    # Home's tier bucket short for 50 ms, within the 100 ms the request may wait: it
    # waits for it there; nothing is taken anywhere.
    await home(100)
    waits = await buckets.acquire(150, [TIER, TENANT], otherwise=otherwise)
    assert not waits.allowed and waits.elsewhere is None and waits.retry_after <= 0.1
    assert await aredis.exists(SMALL.key) == 0
    # Short for 150 ms: a shed at home, so the other pool's buckets are taken instead,
    # its own cost (100) from them and the tenant's, nothing from home's.
    await home(0)
    moved = await buckets.acquire(150, [TIER, TENANT], otherwise=otherwise)
    assert moved.allowed and moved.elsewhere is True
    assert moved.remaining == pytest.approx(400)  # the small pool's tier bucket
    assert await tokens(aredis, TENANT.key) == pytest.approx(100, abs=5)
    assert await tokens(aredis, TIER.key) == 0  # home's left as it was
    # The other pool short too: home's refusal stands, nothing taken.
    await home(0)
    await set_state(aredis, SMALL.key, 0, await server_ms(aredis))
    refused = await buckets.acquire(150, [TIER, TENANT], otherwise=otherwise)
    assert not refused.allowed and refused.elsewhere is False
    assert refused.refused == TIER and refused.retry_after > 0.1
    assert await tokens(aredis, SMALL.key) == 0 and await tokens(aredis, TENANT.key) == 200


async def test_a_tenant_over_its_own_rate_is_not_sent_elsewhere(aredis):
    buckets = RedisTokenBuckets(aredis)
    otherwise = Alternative(100, [SMALL, TENANT], load=None, beyond=0.0)
    await set_state(aredis, TENANT.key, 0, await server_ms(aredis))  # 1.5 s from 150
    verdict = await buckets.acquire(150, [TIER, TENANT], otherwise=otherwise)
    assert not verdict.allowed and verdict.refused == TENANT and verdict.elsewhere is None
    assert await aredis.exists(SMALL.key) == 0
