"""Two gateways (Envoy and sidecar each) sharing one Redis admit the configured rate."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.stack import Stack, StackOptions
from tests.integration.helpers import failed_open

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

RUN_SECONDS = 10.0
# 384 characters in one message: 96 + 4 = 100 estimated tokens a request.
BODY = {"messages": [{"role": "user", "content": "x" * 384}], "max_tokens": 1}
COST = 100
RATE = 3000.0  # P1's 35 % of the capacity below: 30 requests a second
BURST = RATE * 0.5
OFFERED_PER_GATEWAY = 45  # requests a second: together three times the budget
KEY = "accuracy-p1"
# Budgets kept in Redis throughout: on a busy machine a call can pass the default 10 ms,
# and each spell of local budgets admits its share again (docs/faults.md).
SHARED_THROUGHOUT = ("--redis-timeout-ms", "500")


@pytest.fixture(scope="module")
def gateways(tmp_path_factory):
    first = Stack(
        StackOptions.on_free_ports(
            tmp_path_factory.mktemp("gw-a"),
            replicas=1,
            time_scale=0.05,
            envoy_concurrency=1,
            sidecar_args=SHARED_THROUGHOUT,
        )
    )
    with first:
        second = Stack(
            StackOptions.on_free_ports(
                tmp_path_factory.mktemp("gw-b"),
                replicas=1,
                time_scale=0.05,
                envoy_concurrency=1,
                redis_url=first.redis_url,
                sidecar_args=SHARED_THROUGHOUT,
            )
        )
        with second:
            config = first.config
            config.tenant("accuracy", "p1", KEY)
            config.set(
                {
                    "fleet": {"capacity_tokens_per_second": RATE / 0.35},
                    # Budget, not load, is the limit: no holding, no overload shedding.
                    "tiers": {"p1": {"max_queue_wait_seconds": 0, "shed_below_free_kv": None}},
                }
            )
            second.config.sync()  # the second sidecar has it too
            yield first, second


async def offer(session, url, until) -> tuple[int, int]:
    admitted = shed = 0
    interval, next_at = 1 / OFFERED_PER_GATEWAY, time.monotonic()
    while next_at < until:
        async with session.post(
            f"{url}/v1/chat/completions", json=BODY, headers={"Authorization": f"Bearer {KEY}"}
        ) as response:
            await response.read()
            if response.headers.get("x-qos-decision"):
                shed += 1
            else:
                admitted += 1
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    return admitted, shed


@pytest.mark.timeout(90)
async def test_two_gateways_admit_the_configured_rate_within_3_percent(gateways):
    async with aiohttp.ClientSession() as session:
        started = time.monotonic()
        results = await asyncio.gather(
            *(offer(session, g.envoy_url, started + RUN_SECONDS) for g in gateways)
        )
        elapsed = time.monotonic() - started
    admitted = sum(a for a, _ in results)
    expected = (RATE * elapsed + BURST) / COST
    assert all(a > 0 for a, _ in results)  # both took from the one budget
    assert sum(s for _, s in results) > admitted  # the budget was the limit
    # What would explain a miss: Envoy sending requests on undecided (past its message
    # timeout), a sidecar deciding alone, admissions from a bucket's headroom.
    metrics = [scrape(f"{g.sidecar_admin_url}/metrics") for g in gateways]
    context = {
        "sent on undecided": [failed_open(g) for g in gateways],
        "budgets went local": [m["qos_budget_mode_switches_total{}"] for m in metrics],
        "from headroom": [m["qos_budget_admitted_from_headroom_total{}"] for m in metrics],
    }
    assert abs(admitted - expected) <= 0.03 * expected, (
        f"admitted {admitted}, expected {expected:.0f} over {elapsed:.2f} s; {context}"
    )
