"""Two sidecars sharing one Redis admit, together, the configured token rate."""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple

import grpc
import pytest

from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.request.extproc.client import ExtProcClient, admitted
from sidecar.tooling.stack.admin_client import scrape

pytestmark = pytest.mark.integration

RUN_SECONDS = 10.0
# 384 characters and one message: 96 + 4 = 100 estimated tokens a request.
BODY = {"messages": [{"role": "user", "content": "x" * 384}]}
COST = 100
# P1 gets 35 % of 8571.4 tokens/s: 3000 tokens/s, 30 requests/s, a 1500-token burst.
CAPACITY = 3000 / 0.35
RATE, BURST = 3000.0, 1500.0
OFFERED_PER_SIDECAR = 45  # requests/s: together three times what the budget allows


class Offered(NamedTuple):
    admitted: int
    shed: int
    first_sent: float
    last_answered: float


async def offer(address: str, until: float) -> Offered:
    """Send paced requests until `until`, once the channel is connected."""
    counts = [0, 0]
    async with grpc.aio.insecure_channel(address) as channel:
        await channel.channel_ready()  # connecting is not part of the measured span
        client = ExtProcClient(channel)
        interval = 1 / OFFERED_PER_SIDECAR
        first = next_at = time.monotonic()
        while next_at < until:
            answer = await client.decide(BODY, api_key="shared-key")
            counts[0 if admitted(answer) else 1] += 1
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        last = time.monotonic()
    return Offered(counts[0], counts[1], first, last)


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_two_sidecars_admit_the_configured_rate_within_5_percent(sidecars, aredis):
    store = ConfigStore(aredis)
    await store.save_config(
        QosConfig.from_partial({"fleet": {"capacity_tokens_per_second": CAPACITY}})
    )
    await store.put_tenant("shared", Tenant(tier=Tier.P1), "shared-key")
    # Budgets kept in Redis throughout: on a busy machine a call can pass the default
    # 10 ms, and each spell of local budgets starts from full buckets (docs/faults.md).
    running = [sidecars("--redis-timeout-ms", "500") for _ in range(2)]
    addresses = [sidecar.grpc_address for sidecar in running]

    started = time.monotonic()
    results = await asyncio.gather(*(offer(a, started + RUN_SECONDS) for a in addresses))
    # From the first request to the last answer: on a busy machine the channels may take
    # a while to connect, and a bucket left alone only fills to its burst.
    elapsed = max(r.last_answered for r in results) - min(r.first_sent for r in results)

    admitted_requests = sum(r.admitted for r in results)
    shed_requests = sum(r.shed for r in results)
    expected = (RATE * elapsed + BURST) / COST
    assert shed_requests > admitted_requests  # the budget, not the offer, was the limit
    assert all(r.admitted > 0 for r in results)  # both sidecars took from the shared budget
    assert abs(admitted_requests - expected) <= 0.05 * expected, (
        f"admitted {admitted_requests}, expected {expected:.0f} over {elapsed:.2f} s"
    )
    for sidecar in running:  # shared all along: never decided alone
        assert scrape(f"{sidecar.admin_url}/metrics")["qos_budget_mode_switches_total{}"] == 0
