"""The history behind the duty team's screen, cluster-wide: what two sidecars decide adds
up in Redis second by second, any sidecar's page shows all of it, and a sidecar started
later (a reload, a restart) shows the minutes before it came."""

from __future__ import annotations

import asyncio
import gzip
import json
import urllib.error
import urllib.request

import grpc
import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from sidecar.config.audit import Actor
from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode, OperatorMode, Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.operator.history.window import RATE_SECONDS
from sidecar.tooling.extproc_client import ExtProcClient, admitted
from tests.integration.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

TOKEN = "history-token"
ADMIN = {"QOS_ADMIN_TOKEN": TOKEN}
BODY = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def admin_json(sidecar, what: str) -> dict:
    """The dashboard API's `what` (history, state), with the admin token."""
    request = urllib.request.Request(
        f"{sidecar.admin_url}/dashboard/api/{what}",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def page(sidecar) -> dict:
    return admin_json(sidecar, "history")


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
    first, second = (
        sidecars(env=ADMIN),
        sidecars(env=ADMIN),
    )
    assert await decide(first, "h-p0", 7) == 7
    assert await decide(second, "h-p0", 5) == 5
    assert await decide(second, "h-p2", 4) == 0  # shed: no pod reports yet
    await wait_until(lambda: totals(first) == (12, 4), what="both sidecars' decisions")
    await wait_until(lambda: totals(second) == (12, 4), what="the other sidecar's page too")

    later = sidecars(env=ADMIN)
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
    sidecar = sidecars(env=ADMIN)
    assert await asyncio.to_thread(status_without_token, sidecar) == 401


async def test_switches_and_controller_moves_are_on_the_time_axis_and_shedding_is_told(
    sidecars, aredis
):
    store = ConfigStore(aredis)
    await store.save_config(QosConfig())
    sidecar = sidecars(env=ADMIN)
    await store.save_mode(OperatorMode(mode=Mode.CORE_ONLY), actor=Actor("ann", "cli"))
    await store.save_shares({Tier.P0: 0.5, Tier.P1: 0.3, Tier.P2: 0.2}, "P0 misses its SLO")
    assert await decide(sidecar, "", 3) == 0  # anonymous: P2, shed

    def told() -> bool:
        found = page(sidecar)
        kinds = [event["kind"] for event in found.get("events", [])]
        shed = found.get("happening", {}).get("shed", [])
        return kinds == ["change", "switch", "controller"] and [s["tier"] for s in shed] == ["p2"]

    await wait_until(told, what="the events and the P2 shed on the page")
    found = page(sidecar)
    assert found["events"][0]["text"].startswith("configuration set by ")
    assert found["events"][1]["text"] == "mode core-only by ann via cli"
    assert (
        found["events"][2]["text"] == "P0 misses its SLO"
        and found["events"][2]["pool"] == "default"
    )
    assert found["happening"]["mode"] == "core-only"
    assert found["happening"]["shed"][0]["reason"] in ("shed_core_only", "shed_no_reports")
    assert found["lines"]["default"]["p0"]["ttft_slo_ms"] == 1000


def fetch(sidecar, **headers) -> tuple[dict, bytes]:
    request = urllib.request.Request(
        f"{sidecar.admin_url}/dashboard/api/history",
        headers={"Authorization": f"Bearer {TOKEN}", **headers},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return dict(response.headers), response.read()


async def test_a_page_that_takes_gzip_gets_the_same_document_compressed(sidecars):
    sidecar = sidecars(env=ADMIN)
    await wait_until(lambda: page(sidecar)["now"] is not None, what="a first second")
    headers, body = await asyncio.to_thread(fetch, sidecar, **{"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    unpacked = json.loads(gzip.decompress(body))
    plain_headers, plain = await asyncio.to_thread(fetch, sidecar)
    assert "Content-Encoding" not in plain_headers
    assert set(unpacked) == set(json.loads(plain)) >= {"pools", "events", "happening", "lines"}


def tier_rates(sidecar) -> tuple[float, float]:
    """P0 admitted and P2 shed a second on the screen's Tiers table, times its window."""
    tiers = admin_json(sidecar, "state")["tiers"]
    return (
        round(tiers["p0"]["admitted_per_second"] * RATE_SECONDS, 6),
        round(tiers["p2"]["shed_per_second"] * RATE_SECONDS, 6),
    )


async def test_the_tiers_table_rates_are_the_cluster_s_on_every_gateway(sidecars, aredis, browser):
    store = ConfigStore(aredis)
    await store.save_config(QosConfig())
    await store.put_tenant("pay", Tenant(tier=Tier.P0), "r-p0")
    await store.put_tenant("batch", Tenant(tier=Tier.P2), "r-p2")
    first, second = sidecars(env=ADMIN), sidecars(env=ADMIN)
    # The screen of the gateway that decides the least, open before anything is decided.
    browser.get(f"{second.admin_url}/dashboard?token={TOKEN}")
    assert await decide(first, "r-p0", 6) == 6
    assert await decide(second, "r-p0", 4) == 4
    assert await decide(first, "r-p2", 3) == 0  # shed: no pod reports yet

    def shown(page) -> bool:
        """P0 1.0 admitted a second and P2 0.3 shed: the cluster's, over the 10 s shown."""
        cells = page.find_elements(By.CSS_SELECTOR, "#tier-p0 td, #tier-p2 td")
        return [c.text for c in cells[1:3]] + [c.text for c in cells[12:14]] == [
            "1.0", "0.0", "0.0", "0.3",
        ]  # fmt: skip

    waiting = WebDriverWait(browser, 15, ignored_exceptions=(StaleElementReferenceException,))
    waiting.until(shown)
    # Both gateways' figures (over the screen's 10 s, once settled) are the cluster's.
    await wait_until(
        lambda: tier_rates(first) == tier_rates(second) == (10, 3), 10, "both gateways' rates"
    )
    # A gateway started later shows the same, decisions it never saw included.
    later = sidecars(env=ADMIN)
    assert await decide(first, "r-p0", 5) == 5

    def agreed() -> bool:
        seen = tier_rates(later)
        return seen[0] >= 5 and seen == tier_rates(first)

    await wait_until(agreed, 20, "a later gateway's rates, the cluster's")
