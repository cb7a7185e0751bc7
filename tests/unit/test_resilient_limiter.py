"""Budgets when Redis fails: local shares at once, shared again when it is back."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as redis

from sidecar.request.limiter.buckets import BucketSpec, Verdict
from sidecar.request.limiter.resilient import LocalTokenBuckets, ResilientLimiter
from tests.unit.clock import Clock

pytestmark = pytest.mark.asyncio

BUCKET = BucketSpec("qos:{bucket-p1}:tier", rate=100.0, burst=50.0)


class Shared:
    def __init__(self) -> None:
        self.failing = False
        self.slow = False
        self.calls = 0
        self.remaining = 1.0  # what Redis says the first bucket holds after a take

    async def acquire(self, cost, buckets, load=None, otherwise=None):
        self.calls += 1
        if self.slow:
            await asyncio.sleep(1)
        if self.failing:
            raise redis.ConnectionError("refused")
        return Verdict(True, remaining=self.remaining)


class Pinger:
    def __init__(self) -> None:
        self.up = False

    async def ping(self):
        if not self.up:
            raise redis.ConnectionError("refused")
        return True


async def test_local_buckets_follow_the_scripts_arithmetic():
    clock = Clock()
    local = LocalTokenBuckets(clock)
    assert local.acquire(50, [BUCKET]).allowed
    refused = local.acquire(10, [BUCKET])
    assert not refused.allowed and refused.retry_after == pytest.approx(0.1)
    clock.now = 0.1
    assert local.acquire(10, [BUCKET]).allowed
    assert local.acquire(51, [BUCKET]).retry_after is None  # above the burst: never


async def test_a_failing_redis_sends_every_decision_local_until_it_answers_again():
    shared, pinger = Shared(), Pinger()
    limiter = ResilientLimiter(shared, pinger, sidecars_alive=lambda: 2, probe_seconds=0.01)
    try:
        shared.remaining = 40.0
        assert (await limiter.acquire(1, [BUCKET])).remaining == 40.0  # shared
        shared.failing = True
        local = await limiter.acquire(1, [BUCKET])
        assert limiter.degraded and local.allowed
        # Half of what Redis said was left (two sidecars), refilled at half the rate for
        # the few milliseconds since.
        assert local.remaining == pytest.approx(20 - 1, abs=1.0)
        shared.remaining = 1.0
        calls = shared.calls
        for _ in range(20):
            await limiter.acquire(1, [BUCKET])
        assert shared.calls == calls  # no request waits on a dead Redis
        shared.failing, pinger.up = False, True
        for _ in range(100):
            if not limiter.degraded:
                break
            await asyncio.sleep(0.01)
        assert not limiter.degraded
        assert (await limiter.acquire(1, [BUCKET])).remaining == 1.0
        assert limiter.switches == 2
    finally:
        await limiter.stop()


async def test_going_local_does_not_grant_again_a_burst_the_fleet_spent():
    shared = Shared()
    limiter = ResilientLimiter(shared, Pinger(), sidecars_alive=lambda: 2, probe_seconds=60)
    try:
        shared.remaining = 0.0  # the fleet took the whole burst
        assert (await limiter.acquire(1, [BUCKET])).allowed
        shared.failing = True
        local = await limiter.acquire(10, [BUCKET])
        assert limiter.degraded and not local.allowed
        # Ten tokens at this sidecar's half of the rate (50 a second): about 0.2 s.
        assert local.retry_after == pytest.approx(0.2, abs=0.05)
    finally:
        await limiter.stop()


async def test_a_slow_redis_costs_a_decision_at_most_the_timeout():
    shared = Shared()
    shared.slow = True
    limiter = ResilientLimiter(shared, Pinger(), sidecars_alive=lambda: 1, timeout=0.01)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        assert (await limiter.acquire(1, [BUCKET])).allowed
        assert loop.time() - started < 0.5 and limiter.degraded
    finally:
        await limiter.stop()


class Flaky(Pinger):
    """A client library in trouble while it reconnects: an error that is not Redis's."""

    def __init__(self) -> None:
        super().__init__()
        self.odd_errors = 3

    async def ping(self):
        if self.odd_errors:
            self.odd_errors -= 1
            raise AttributeError("'NoneType' object has no attribute 'read'")
        return True


async def test_the_probe_survives_the_client_library_s_own_errors():
    shared, pinger = Shared(), Flaky()
    limiter = ResilientLimiter(shared, pinger, sidecars_alive=lambda: 1, probe_seconds=0.01)
    try:
        shared.failing = True
        await limiter.acquire(1, [BUCKET])
        assert limiter.degraded
        shared.failing = False
        for _ in range(100):
            if not limiter.degraded:
                break
            await asyncio.sleep(0.01)
        assert not limiter.degraded and pinger.odd_errors == 0
    finally:
        await limiter.stop()


async def test_a_request_the_bucket_holds_waits_its_turn_locally_never_told_it_never_fits():
    """Nine sidecars: a share's burst (50/9) is smaller than a request of 20 the bucket
    holds. Locally it is admitted, then waits its turn at the share's rate: a wait, never
    'no burst will ever hold this' (a 400 the client cannot fix)."""
    shared = Shared()
    limiter = ResilientLimiter(shared, Pinger(), sidecars_alive=lambda: 9, probe_seconds=60)
    try:
        shared.failing = True
        assert (await limiter.acquire(20, [BUCKET])).allowed
        second = await limiter.acquire(20, [BUCKET])
        assert limiter.degraded and not second.allowed and second.retry_after is not None
        # The share refills at 100/9 tokens a second: 20 tokens in about 1.8 s.
        assert second.retry_after == pytest.approx(20 / (100 / 9), abs=0.1)
        too_big = await limiter.acquire(51, [BUCKET])
        assert not too_big.allowed and too_big.retry_after is None  # beyond the bucket
    finally:
        await limiter.stop()


async def test_a_tenant_budget_is_not_granted_again_at_each_switch_to_local_budgets():
    """Redis never says a tenant bucket's level: locally it starts empty, so a sidecar
    flapping between shared and local budgets does not hand its tenants a new burst at
    every switch."""
    tenant = BucketSpec("qos:{bucket-p1}:tenant:t", rate=90.0, burst=90.0)
    shared = Shared()
    limiter = ResilientLimiter(shared, Pinger(), sidecars_alive=lambda: 9, probe_seconds=60)
    try:
        shared.failing = True
        refused = await limiter.acquire(10, [BUCKET, tenant])
        assert limiter.degraded and not refused.allowed and refused.refused == tenant
        assert refused.retry_after == pytest.approx(10 / (90 / 9), abs=0.1)
    finally:
        await limiter.stop()
