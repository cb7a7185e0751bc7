"""Operator modes set with the CLI reach every running sidecar within a second."""

from __future__ import annotations

import getpass
import re
import socket
import time

import grpc
import pytest

from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.store import ConfigStore
from sidecar.tooling.extproc_client import ExtProcClient
from tests.integration.helpers import cli, decision_count

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


async def outcome(address: str, key: str) -> str:
    """The sidecar's decision for one request: "admit" or the reason it answered itself."""
    async with grpc.aio.insecure_channel(address) as channel:
        answer = await ExtProcClient(channel).decide(BODY, api_key=key)
    if answer.WhichOneof("response") == "request_body":
        return "admit"
    headers = {
        h.header.key: h.header.raw_value.decode()
        for h in answer.immediate_response.headers.set_headers
    }
    return headers["x-qos-decision"]


async def until_all(addresses, key, expected, within=1.0) -> float:
    started = time.monotonic()
    while True:
        seen = [await outcome(a, key) for a in addresses]
        if seen == [expected] * len(addresses):
            return time.monotonic() - started
        assert time.monotonic() - started < within, f"{seen} after {within} s"


async def test_core_only_from_the_cli_reaches_two_sidecars_within_a_second(
    sidecars, redis_url, aredis
):
    store = ConfigStore(aredis)
    await store.put_tenant("care", Tenant(tier=Tier.P1), "k-p1")
    await store.put_tenant("pay", Tenant(tier=Tier.P0), "k-p0")
    addresses = [sidecars().grpc_address, sidecars().grpc_address]
    await until_all(addresses, "k-p1", "admit", within=5)

    await cli(redis_url, "mode", "set", "core-only")
    elapsed = await until_all(addresses, "k-p1", "shed_core_only")
    assert elapsed < 1.0
    assert [await outcome(a, "k-p0") for a in addresses] == ["admit", "admit"]
    assert "mode: core-only" in await cli(redis_url, "mode", "get")

    await cli(redis_url, "mode", "shed", "p0")
    await until_all(addresses, "k-p0", "shed_forced")
    await cli(redis_url, "mode", "unshed", "p0")
    await cli(redis_url, "mode", "set", "normal")
    await until_all(addresses, "k-p1", "admit")
    await until_all(addresses, "k-p0", "admit")


async def test_shadow_refuses_nothing_and_counts_what_it_would_have_refused(sidecars, redis_url):
    sidecar = sidecars()
    # No pod reports at all: P2 (anonymous requests) is shed as load unknown...
    assert await outcome(sidecar.grpc_address, "") == "shed_no_reports"
    await cli(redis_url, "mode", "set", "shadow")
    # ...and in shadow mode it goes through, counted as what would have happened.
    await until_all([sidecar.grpc_address], "", "admit")
    # The one admission that ended the wait is counted just after its answer went out.
    before = decision_count(sidecar.admin_url, "admit", "shadow_shed_no_reports", reach=1)
    for _ in range(3):
        assert await outcome(sidecar.grpc_address, "") == "admit"
    shadowed = decision_count(sidecar.admin_url, "admit", "shadow_shed_no_reports", before + 3)
    assert shadowed == before + 3


async def test_every_cli_switch_is_recorded_with_who_made_it(redis_url):
    await cli(redis_url, "mode", "set", "core-only", "--by", "alice")
    await cli(redis_url, "mode", "shed", "p2")  # by default: the user and host
    shown = await cli(redis_url, "mode", "get")
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    when = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"  # UTC
    assert re.search(f"last switch: {when} shed p2 by {re.escape(who)} via cli", shown)
    log = (await cli(redis_url, "mode", "log")).splitlines()
    assert re.match(f'{when} shed p2 by .*; force_shed: \\[\\] -> \\["p2"\\]$', log[0])
    assert re.match(f'{when} mode core-only by alice via cli; mode: "normal" -> ', log[1])
    await cli(redis_url, "mode", "unshed", "p2", "--by", "alice")
    await cli(redis_url, "mode", "set", "normal", "--by", "alice")
    assert len((await cli(redis_url, "mode", "log", "--count", "3")).splitlines()) == 3
