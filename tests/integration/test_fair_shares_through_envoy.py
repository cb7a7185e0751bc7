"""Fair shares inside a tier, through real Envoy: one P1 tenant flooding the tier cannot
take it from the others, who are served as if it were not there; alone, it has it all;
weights split it; two gateways on one Redis keep the same shares."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys

import pytest

from sidecar.config.schema import TiersConfig
from sidecar.tooling.benchmarks.tenant_load import (
    Answer,
    TenantLoad,
    chat,
    median_latency,
    of,
    offer,
    served_share,
    tokens_served_between,
)
from sidecar.tooling.stack.stack import Stack, StackOptions
from tests.integration.helpers import scrape, stack_with_tenants, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CAPACITY = 20_000.0  # the fleet's tokens a second: P1's 35 % is 7 000
RATE = CAPACITY * 0.35
BURST = RATE * TiersConfig().p1.burst_seconds  # the tier bucket's size
KEYS = {name: f"fair-{name}" for name in ("a", "b", "c", "d")}
FLOOD, LIGHT = chat(1_000), chat(100)
WINDOW = (2.0, 20.0)  # seconds of a 20 s offer measured: its first burst is spent by then
CONFIG = {
    "fleet": {"capacity_tokens_per_second": CAPACITY},
    # The tenants of one test have gone quiet by the next (the default is 5 s).
    "fairness": {"active_seconds": 1.0},
}


@pytest.fixture(scope="module")
def fair_stack(tmp_path_factory):
    tenants = {name: ("p1", key) for name, key in KEYS.items()}
    with stack_with_tenants(
        tmp_path_factory.mktemp("fair-stack"), tenants, time_scale=0.01, replicas=1
    ) as stack:
        stack.config.set(CONFIG)
        yield stack


@pytest.fixture(scope="module")
def second_gateway(fair_stack, tmp_path_factory):
    """Another sidecar and Envoy (with a GPU of their own) on the same Redis."""
    options = StackOptions.on_free_ports(
        tmp_path_factory.mktemp("fair-second"),
        redis_url=fair_stack.redis_url,
        time_scale=0.01,
        replicas=1,
        envoy_concurrency=1,
    )
    with Stack(options) as stack:
        yield stack


def load(tenant: str, url: str, times_rate: float, body: dict) -> TenantLoad:
    return TenantLoad(tenant, KEYS[tenant], url, times_rate * RATE, body)


def tokens_in_window(answers: list[Answer]) -> float:
    return tokens_served_between(answers, *WINDOW)


async def tier_metrics_while(stack: Stack, floods: asyncio.Task) -> list[dict[str, float]]:
    """The sidecar's metrics, read every half second of the measured window of `floods`:
    the fairness gauges are refreshed every second from the tenants' last calls, so one
    reading after the floods end (or at the wrong moment) says little."""
    started, readings = asyncio.get_running_loop().time(), []
    while not floods.done():
        if asyncio.get_running_loop().time() - started >= WINDOW[0]:
            readings.append(await asyncio.to_thread(scrape, f"{stack.sidecar_admin_url}/metrics"))
        await asyncio.wait([floods], timeout=0.5)
    return readings


def readings_of(readings: list[dict[str, float]], key: str) -> list[float]:
    values = [r[key] for r in readings if key in r]
    assert values, f"{key} never read"
    return values


def assert_the_tier_s_rate(total: float, expected: float) -> None:
    """Served at the tier's rate over a window: no less, and no more than a token bucket
    lets through in any window, its rate and its burst. (Answers count when they end: on
    a busy machine the first burst's last answers end inside the window.)"""
    assert -0.03 * expected <= total - expected <= 0.03 * expected + BURST, (total, expected)


async def quiet():
    await asyncio.sleep(1.5)  # the tenants before go quiet (1 s) and the bucket refills


async def flood_beside_light_tenants(urls: dict[str, str]) -> None:
    """A offers 10x the tier's rate, B, C and D 10 % each, each through its gateway."""
    light = [load(t, urls[t], 0.10, LIGHT) for t in "bcd"]
    alone = await offer(light, seconds=5)
    await quiet()
    flooded = await offer([load("a", urls["a"], 10, FLOOD), *light], WINDOW[1])
    for tenant in "bcd":
        mine = of(flooded, tenant)
        assert served_share(mine) >= 0.95, (tenant, served_share(mine))
        before, during = median_latency(of(alone, tenant)), median_latency(mine)
        assert during <= 2 * before, (tenant, before, during)
    # The tier's rate; A has what B, C and D leave of it: at least 70 %, more when a busy
    # client sent some of theirs late (the tier's rate bounds it from above).
    expected = RATE * (WINDOW[1] - WINDOW[0])
    assert_the_tier_s_rate(tokens_in_window(flooded), expected)
    flood = tokens_in_window(of(flooded, "a"))
    assert flood / expected >= 0.70 - 0.05, (flood, expected)


async def test_a_flood_cannot_take_the_tier_from_the_other_tenants(fair_stack):
    url = fair_stack.envoy_url
    await flood_beside_light_tenants(dict.fromkeys("abcd", url))


async def test_alone_a_tenant_has_the_whole_tier(fair_stack):
    await quiet()
    flooded = await offer([load("a", fair_stack.envoy_url, 3, FLOOD)], WINDOW[1] / 2)
    expected = RATE * (WINDOW[1] / 2 - WINDOW[0])
    assert_the_tier_s_rate(tokens_served_between(flooded, WINDOW[0], WINDOW[1] / 2), expected)


async def test_weights_split_a_tier_both_flood(fair_stack):
    fair_stack.config.tenant("b", "p1", KEYS["b"], weight=3)
    try:
        await quiet()
        url = fair_stack.envoy_url
        floods = asyncio.create_task(
            offer([load("b", url, 5, FLOOD), load("c", url, 5, FLOOD)], WINDOW[1])
        )
        readings = await tier_metrics_while(fair_stack, floods)
        flooded = await floods
    finally:
        fair_stack.config.tenant("b", "p1", KEYS["b"])
    heavy, light = (tokens_in_window(of(flooded, t)) for t in "bc")
    assert 2.7 <= heavy / light <= 3.3, (heavy, light)
    # Visible as the floods go: the tier's active tenants, the fairness index near 1 (each
    # tenant's served rate decays from its last call to Redis, which the over-limit cache
    # spaces out: single readings sank to 0.89 and 0.92), the top tenants.
    tier = '{pool="default",tier="p1"}'
    indexes = readings_of(readings, f"qos_tier_fairness_index{tier}")
    assert statistics.median(indexes) > 0.95, indexes
    active = readings_of(readings, f"qos_tier_active_tenants{tier}")
    assert statistics.median(active) == 2, active
    top = 'qos_tier_top_tenant_served_tokens_per_second{pool="default",tenant="%s",tier="p1"}'
    served = [statistics.median(readings_of(readings, top % t)) for t in "bc"]
    assert served[0] > served[1] > 0, served


async def test_two_gateways_keep_the_same_shares(fair_stack, second_gateway):
    await quiet()
    await wait_until(lambda: second_gateway.config.sync() > 0, what="the second gateway")
    first, second = fair_stack.envoy_url, second_gateway.envoy_url
    await flood_beside_light_tenants({"a": first, "b": second, "c": first, "d": second})


async def test_tenants_top_prints_the_tier(fair_stack):
    await quiet()
    await offer([load("a", fair_stack.envoy_url, 2, FLOOD)], 3)
    # a goes on asking while the command starts and reads: a tenant counts as active for
    # 1 s after it last asked here, less than a Python command may take to start.
    still_asking = asyncio.create_task(offer([load("a", fair_stack.envoy_url, 2, FLOOD)], 6))
    command = [sys.executable, "-m", "sidecar", "tenants", "top"]
    try:
        printed = await asyncio.to_thread(
            lambda: (
                subprocess.run(
                    [*command, "--redis-url", fair_stack.redis_url],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=True,
                ).stdout
            )
        )
    finally:
        await still_asking
    assert "default p1: rate 7,000 tokens/s, 1 active" in printed, printed
    line = next(row for row in printed.splitlines() if row.strip().startswith("a "))
    served = float(line.split()[2].replace(",", ""))
    assert 0.5 * RATE < served < 1.5 * RATE, line
