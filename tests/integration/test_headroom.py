"""A sidecar admits from a tier bucket's known headroom and charges Redis behind."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from sidecar.budget_layout import tier_bucket_key
from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.tooling.extproc_client import ExtProcClient, admitted
from sidecar.tooling.stack.admin_client import scrape

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

# 384 characters and one message: 96 + 4 = 100 estimated tokens a request.
BODY = {"messages": [{"role": "user", "content": "x" * 384}]}
COST = 100
# P1 gets 35 % of the capacity: 100 tokens/s, and a burst of 10 000 (100 s of it).
RATE, BURST = 100.0, 10_000.0
REQUESTS = 30


async def level(aredis) -> float:
    return float(await aredis.hget(tier_bucket_key("p1"), "tokens") or BURST)


async def configure(aredis) -> None:
    store = ConfigStore(aredis)
    await store.save_config(
        QosConfig.from_partial(
            {
                "fleet": {"capacity_tokens_per_second": RATE / 0.35},
                "tiers": {"p1": {"burst_seconds": BURST / RATE}},
            }
        )
    )
    await store.put_tenant("shop", Tenant(tier=Tier.P1), "shop-key")


@pytest.mark.timeout(60)
async def test_admissions_from_headroom_are_charged_behind_them(sidecars, aredis):
    await configure(aredis)
    sidecar = sidecars("--redis-timeout-ms", "500", "--charge-behind-ms", "50")
    async with grpc.aio.insecure_channel(sidecar.grpc_address) as channel:
        await channel.channel_ready()
        client = ExtProcClient(channel)
        started = time.monotonic()
        for _ in range(REQUESTS):
            assert admitted(await client.decide(BODY, api_key="shop-key"))
        elapsed = time.monotonic() - started

    metrics = scrape(f"{sidecar.admin_url}/metrics")
    # The first asked Redis; the bucket then held far more than its reserve.
    assert metrics["qos_budget_admitted_from_headroom_total{}"] == REQUESTS - 1
    # Every admission is charged within the interval: the bucket holds what Redis
    # refilled less all that was admitted, whichever way.
    charged = BURST - REQUESTS * COST
    for _ in range(100):
        now = await level(aredis)
        if now <= charged + RATE * (time.monotonic() - started):
            break
        await asyncio.sleep(0.02)
    assert charged <= now <= charged + RATE * (elapsed + 1.0), now
    assert metrics["qos_budget_charges_lost_total{}"] == 0


@pytest.mark.timeout(60)
async def test_without_charges_behind_every_decision_asks_redis(sidecars, aredis):
    await configure(aredis)
    sidecar = sidecars("--charge-behind-ms", "0")
    async with grpc.aio.insecure_channel(sidecar.grpc_address) as channel:
        await channel.channel_ready()
        client = ExtProcClient(channel)
        for _ in range(3):
            assert admitted(await client.decide(BODY, api_key="shop-key"))
    metrics = scrape(f"{sidecar.admin_url}/metrics")
    assert metrics["qos_budget_admitted_from_headroom_total{}"] == 0
    assert await level(aredis) <= BURST - 3 * COST + RATE  # each charged by its call
