"""The history behind the duty team's screen, cluster-wide: what two sidecars decide adds
up in Redis second by second, any sidecar's page shows all of it, and a sidecar started
later (a reload, a restart) shows the minutes before it came."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import grpc
import pytest

from sidecar.config.schema import QosConfig, Tenant, Tier
from sidecar.config.store import ConfigStore
from sidecar.extproc.client import ExtProcClient, admitted
from tests.integration.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

TOKEN = "history-token"
BODY = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def page(sidecar) -> dict:
    request = urllib.request.Request(
        f"{sidecar.admin_url}/dashboard/api/history",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def totals(sidecar) -> tuple[float, float]:
    """P0 admitted and P2 shed (no pod reports: P2 is shed as unknown load), all window."""
    pools = page(sidecar).get("pools") or {}
    tiers = pools.get("default", {}).get("tiers", {})
    p0 = sum(tiers.get("p0", {}).get("admitted", []))
    p2 = sum(tiers.get("p2", {}).get("shed", {}).get("shed_no_reports", []))
    return p0, p2


async def decide(sidecar, key: str, times: int) -> int:
    async with grpc.aio.insecure_channel(sidecar.grpc_address) as channel:
        client = ExtProcClient(channel)
        return sum([admitted(await client.decide(BODY, api_key=key)) for _ in range(times)])


async def test_two_sidecars_add_up_and_a_later_one_sees_the_minutes_before(sidecars, aredis):
    store = ConfigStore(aredis)
    await store.save_config(QosConfig())
    await store.put_tenant("pay", Tenant(tier=Tier.P0), "h-p0")
    await store.put_tenant("batch", Tenant(tier=Tier.P2), "h-p2")
    first, second = sidecars(f"--admin-token={TOKEN}"), sidecars(f"--admin-token={TOKEN}")
    assert await decide(first, "h-p0", 7) == 7
    assert await decide(second, "h-p0", 5) == 5
    assert await decide(second, "h-p2", 4) == 0  # shed: no pod reports yet
    await wait_until(lambda: totals(first) == (12, 4), what="both sidecars' decisions")
    assert totals(second) == (12, 4)

    later = sidecars(f"--admin-token={TOKEN}")
    await wait_until(lambda: totals(later) == (12, 4), what="the window before it started")
    series = page(later)
    assert len(series["mode"]) == 600 and series["mode"][-1] == "normal"
    pool = series["pools"]["default"]
    assert pool["max_concurrency"][-1] == 256.0
    assert pool["tiers"]["p2"]["shedding"][-1] == "shed_no_reports"


def status_without_token(sidecar) -> int:
    try:
        with urllib.request.urlopen(f"{sidecar.admin_url}/dashboard/api/history", timeout=5):
            return 200
    except urllib.error.HTTPError as error:
        error.close()
        return error.code


async def test_the_page_needs_the_token(sidecars):
    sidecar = sidecars(f"--admin-token={TOKEN}")
    assert await asyncio.to_thread(status_without_token, sidecar) == 401
