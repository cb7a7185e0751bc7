"""Charges sent behind admissions (charge.lua) against a real redis-server: the level,
the debt bound, the admission record and the tenant's fair share."""

from __future__ import annotations

import pytest

from sidecar.budget_layout import AdmittedLoad, fair_share_keys, tier_bucket_key
from sidecar.loops.overload.admission_records import AdmissionRecords
from sidecar.request.limiter.buckets import BucketSpec, FairShare
from sidecar.request.limiter.redis_buckets import RedisTokenBuckets

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

RATE, BURST = 1000.0, 1000.0
TIER = BucketSpec(tier_bucket_key("p1"), RATE, BURST)  # in debt down to a burst
STATE, ACTIVE = fair_share_keys("p1")


def fairly(tenant: str) -> BucketSpec:
    fair = FairShare(STATE, ACTIVE, tenant, 1.0, 0.5, 5.0, 500.0)
    return BucketSpec(TIER.key, RATE, BURST, fair)


async def test_a_charge_takes_its_tokens_and_says_the_level(aredis):
    buckets = RedisTokenBuckets(aredis)
    charged = await buckets.charge(400, TIER, None, admissions=4)
    assert charged.level == pytest.approx(600, abs=1)  # a missing bucket is full
    assert charged.recorded_us == 0
    assert float(await aredis.hget(TIER.key, "tokens")) == charged.level
    # Taken whether the bucket holds it or not: into debt, within the bucket's most.
    assert (await buckets.charge(800, TIER, None, 8)).level == pytest.approx(-200, abs=2)
    assert (await buckets.charge(900, TIER, None, 9)).level == -BURST
    assert await aredis.pttl(TIER.key) > 1000  # lives until refilled, as every store
    refused = await buckets.acquire(1, [TIER])
    assert not refused.allowed and refused.retry_after > 0.9  # the debt is owed first


async def test_a_charge_records_its_admissions_summed(aredis):
    buckets = RedisTokenBuckets(aredis)
    records = AdmissionRecords(aredis, lambda: ("default",))
    one = await buckets.acquire(10, [TIER], AdmittedLoad("p1", "default", blocks=2))
    charged = await buckets.charge(30, TIER, AdmittedLoad("p1", "default", blocks=9), 3)
    assert charged.recorded_us > one.recorded_us > 0
    read = await records.recent(newer_than=5.0)
    assert read.holds("p1", charged.recorded_us)
    assert sum(r.blocks for r in read.by_pool["default"]) == 2 + 9
    assert sum(r.requests for r in read.by_pool["default"]) == 1 + 3
    assert charged.level == pytest.approx(BURST - 40, abs=1)


async def test_a_charge_counts_in_the_tenants_fair_share_as_admissions_do(aredis):
    buckets = RedisTokenBuckets(aredis)
    assert (await buckets.acquire(100, [fairly("a")])).allowed
    before = float((await aredis.hget(STATE, "t:a")).decode().split(",")[0])
    await buckets.charge(250, fairly("a"), None, 2)
    served = float((await aredis.hget(STATE, "t:a")).decode().split(",")[0])
    # What it was served, decayed a little over the half-second window, plus the 250.
    assert before * 0.9 + 250 <= served <= before + 250
    assert float(await aredis.hget(STATE, "#served")) == pytest.approx(served, rel=0.01)
    # A tenant first seen in a charge joins the tier's active tenants, as on admission.
    await buckets.charge(100, fairly("new"), None, 1)
    assert await aredis.zscore(ACTIVE, "new") is not None
    assert float(await aredis.hget(STATE, "#weights")) == 2.0
    assert await aredis.pttl(ACTIVE) > 0  # kept alive with the state, as the sweeps do
