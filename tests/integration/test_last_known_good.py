"""In core-only, whatever restarts while another part is away, the gateway serves what the
operators set, never defaults: no P2 request reaches the model servers, every P0 key is
served as P0 whenever a sidecar is up, and afterwards the mode, tenants, keys and the
record of changes are as they were. Through real Envoy and real Redis, in front of a
model server that records every request that reaches it."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from sidecar.config.runtime_layer import CORE_ONLY_KEY, LAYER
from sidecar.config.store import API_KEYS_KEY, CHECKSUM_KEY, MODE_KEY, VERSION_KEY
from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess
from sidecar.tooling.stack.redis_servers import start_redis_server
from sidecar.tooling.stack.stack import Stack, start_envoy, start_sidecar
from tests.integration.helpers import (
    SteadyLoad,
    chat_once,
    cli,
    readyz,
    recorded,
    recording_upstream,
    scrape,
    stack_with_tenants,
    to_one_upstream,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

P0_KEY, P2_KEY = "lkg-pay", "lkg-bulk"
TENANTS = {"pay": ("p0", P0_KEY), "bulk": ("p2", P2_KEY)}


@dataclass
class Gateway:
    """The stack's sidecar (and Redis), and an Envoy of this test's in front of the
    recording model server."""

    stack: Stack
    work: Path
    upstream: int
    listen: int
    admin: int
    envoy: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listen}"

    def start_envoy(self, name: str = "envoy-lkg") -> None:
        config = to_one_upstream(self.stack.envoy_config(self.listen, self.admin), self.upstream)
        self.envoy = start_envoy(config, self.work, self.admin, name, 1, self.stack.envoy_env)

    def kill_redis(self) -> None:
        self.stack.process(self.stack.redis_process_name).send_signal(signal.SIGKILL)

    def start_redis_empty(self) -> None:
        options = self.stack.options
        self.stack.processes.append(start_redis_server(options.work_dir, options.redis_port))

    def kill_sidecar(self) -> None:
        running = [p for p in self.stack.processes if p.name.startswith("sidecar") and p.running()]
        for process in running:
            process.send_signal(signal.SIGKILL)
            process.wait(10)

    async def sidecar_restarted_without_redis(self) -> None:
        """Redis killed, then the sidecar killed and started again while it is away."""
        self.kill_redis()
        await wait_until(lambda: not readiness.redis_ping(self.stack.redis_url), what="Redis gone")
        self.kill_sidecar()
        self.stack.restart_sidecar()


@pytest.fixture
def gateway(tmp_path) -> Iterator[Gateway]:
    with (
        stack_with_tenants(tmp_path, TENANTS, replicas=1) as stack,
        recording_upstream(tmp_path) as port,
    ):
        gateway = Gateway(stack, tmp_path, port, free_port(), free_port())
        try:
            gateway.start_envoy()
            yield gateway
        finally:
            if gateway.envoy is not None:
                gateway.envoy.stop()


async def core_only_on_disk(gateway: Gateway) -> None:
    """Core-only set by an operator, and in the sidecar's copy on disk."""
    stack = gateway.stack
    await cli(stack.redis_url, "mode", "set", "core-only", "--by", "duty")
    await wait_until(
        lambda: (
            scrape(f"{stack.sidecar_admin_url}/metrics").get("qos_config_copy_version{}", 0)
            >= scrape(f"{stack.sidecar_admin_url}/metrics").get("qos_config_version{}", 1)
            and _mode_on_disk(stack) == "core-only"
        ),
        what="core-only on the sidecar's disk",
    )


def _mode_on_disk(stack: Stack) -> str | None:
    link = stack.state.envoy_link / "qos" / "mode"
    return link.read_text() if link.exists() else None


async def both(gateway: Gateway, session: aiohttp.ClientSession) -> tuple:
    p0 = await chat_once(session, gateway.url, P0_KEY)
    p2 = await chat_once(session, gateway.url, P2_KEY)
    return p0, p2


def live_layer(gateway: Gateway) -> str | None:
    """`qos.core_only` in the layer Envoy has from a live sidecar (RTDS), None before it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.admin}/runtime", timeout=5) as r:
        runtime = json.load(r)
    entry = runtime["entries"].get(CORE_ONLY_KEY)
    if entry is None:
        return None
    value = entry["layer_values"][runtime["layers"].index(LAYER)]
    return value or None


def undecided_or_p2(gateway: Gateway) -> list[dict]:
    """What reached the model server that core-only must keep from it: a P2 request, or
    one no sidecar decided (which could be anyone's)."""
    return [r for r in recorded(gateway.upstream) if r["key"] == P2_KEY or r["tier"] != "p0"]


async def operators_state_is_whole(stack: Stack) -> None:
    assert "mode: core-only" in await cli(stack.redis_url, "mode", "get")
    tenants = await cli(stack.redis_url, "tenants", "list")
    assert "pay" in tenants and "bulk" in tenants
    audit = json.loads(await cli(stack.redis_url, "audit", "--output", "json"))
    assert any(entry["what"] == "mode core-only" for entry in audit), audit
    added = {entry["what"] for entry in audit}
    assert {"tenant pay added", "tenant bulk added"} <= added, added


@pytest.mark.timeout(120)
async def test_sidecar_restarted_without_redis_then_redis_back_empty(gateway):
    """(a) the sidecar restarted while Redis is down decides from its copy on disk; (d)
    Redis then back empty gets the operators' state back, not defaults."""
    stack = gateway.stack
    await core_only_on_disk(gateway)
    async with SteadyLoad(lambda session: both(gateway, session), clients=2) as load:
        await wait_until(lambda: len(load.results) > 10, what="requests before")
        await gateway.sidecar_restarted_without_redis()
        restarted = len(load.results)
        await wait_until(lambda: len(load.results) > restarted + 30, what="requests without Redis")
        samples = scrape(f"{stack.sidecar_admin_url}/metrics")
        assert samples['qos_config_source{source="local_copy"}'] == 1
        # Ready (its pod stays in the Service), saying what it serves from.
        status, body = readyz(stack.sidecar_admin_url)
        assert status == 200 and body.startswith("ready\nRedis not reached"), body
        assert "last known good configuration" in body
        gateway.start_redis_empty()
        await wait_until(
            lambda: (
                scrape(f"{stack.sidecar_admin_url}/metrics").get("qos_config_put_back_total{}") == 1
            ),
            what="put back into the empty Redis",
        )
        back = len(load.results)
        await wait_until(lambda: len(load.results) > back + 20, what="requests after")
    after_restart = load.results[restarted:]
    # Every payment served as P0 and every batch request shed, all through.
    assert {result for result in after_restart} == {((200, None), (200, "shed_core_only"))}
    assert undecided_or_p2(gateway) == []
    await operators_state_is_whole(stack)


@pytest.mark.timeout(150)
async def test_envoy_restarted_while_the_sidecar_is_down_stays_closed(gateway):
    """(b) Envoy restarted while no sidecar answers reads core-only from disk and fails
    closed; the sidecar back after 20 s, P0 is served again within 2 s, and Envoy has the
    sidecar's live layer back within 2 s too."""
    stack = gateway.stack
    await core_only_on_disk(gateway)
    gateway.kill_sidecar()
    assert gateway.envoy is not None
    gateway.envoy.stop()
    gateway.start_envoy(name="envoy-lkg-again")
    assert live_layer(gateway) is None  # the mode it holds is the one on disk alone
    async with aiohttp.ClientSession() as session:
        outage = time.monotonic()
        answers = []
        while time.monotonic() - outage < 20:
            answers.append(await both(gateway, session))
            await asyncio.sleep(0.05)
        assert {p0[0] for p0, _ in answers} == {503} and {p2[0] for _, p2 in answers} == {503}
        stack.restart_sidecar()
        answering = time.monotonic()
        while (await chat_once(session, gateway.url, P0_KEY)) != (200, None):
            assert time.monotonic() - answering < 10, "P0 not served again"
            await asyncio.sleep(0.02)
        back = time.monotonic() - answering
        assert await chat_once(session, gateway.url, P2_KEY) == (200, "shed_core_only")
        await wait_until(lambda: live_layer(gateway) == "100", within=5, what="the live layer")
        live = time.monotonic() - answering
    assert back < 2 and live < 2, (back, live)
    assert undecided_or_p2(gateway) == []
    print(
        f"{len(answers)} requests refused in the outage; P0 served {back:.2f} s and the live "
        f"layer back {live:.2f} s after the sidecar answered"
    )
    await operators_state_is_whole(stack)


@pytest.mark.timeout(120)
async def test_two_sidecars_the_one_in_use_restarted_during_a_redis_outage(gateway, tmp_path):
    """(c) with a second sidecar beside it, the sidecar Envoy uses restarted while Redis is
    away: no P2 through at any point, before Redis answers or after."""
    stack = gateway.stack
    other = start_sidecar(
        tmp_path, stack.redis_url, name="sidecar-other", env={"QOS_ADMIN_TOKEN": "x"}
    )
    try:
        await core_only_on_disk(gateway)
        await wait_until(
            lambda: (
                scrape(f"{other.admin_url}/metrics").get("qos_config_copy_version{}", 0)
                == scrape(f"{stack.sidecar_admin_url}/metrics").get("qos_config_version{}")
            ),
            what="the other sidecar's copy",
        )
        async with SteadyLoad(lambda session: both(gateway, session), clients=2) as load:
            await wait_until(lambda: len(load.results) > 10, what="requests before")
            await gateway.sidecar_restarted_without_redis()
            restarted = len(load.results)
            await wait_until(lambda: len(load.results) > restarted + 20, what="requests")
            gateway.start_redis_empty()
            await wait_until(
                lambda: (
                    sum(
                        scrape(f"{url}/metrics").get("qos_config_put_back_total{}", 0)
                        for url in (stack.sidecar_admin_url, other.admin_url)
                    )
                    == 1
                ),
                what="put back once",
            )
            back = len(load.results)
            await wait_until(lambda: len(load.results) > back + 20, what="requests after")
        assert {r for r in load.results[restarted:]} == {((200, None), (200, "shed_core_only"))}
        assert undecided_or_p2(gateway) == []
        await operators_state_is_whole(stack)
    finally:
        other.process.stop()


@pytest.mark.timeout(120)
async def test_the_mode_key_and_the_key_index_deleted_by_hand_are_put_back(gateway):
    """Part of the state lost behind its version: the sidecars tell it by the checksum
    and put it back within seconds; meanwhile no P2 is admitted and `mode get` waits
    rather than say normal."""
    stack = gateway.stack
    await core_only_on_disk(gateway)
    raw = aioredis.Redis.from_url(stack.redis_url)
    said: list[str] = []
    try:
        async with SteadyLoad(lambda session: both(gateway, session), clients=2) as load:
            await wait_until(lambda: len(load.results) > 10, what="requests before")
            # The checksum of the version in force is recorded (what lets a command tell
            # a part is lost): the sidecar records it a moment after loading the version.
            version = (await raw.get(VERSION_KEY)).decode()
            for _ in range(100):
                if ((await raw.get(CHECKSUM_KEY)) or b"").decode().startswith(f"{version}:"):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("no checksum recorded for the version in force")
            deleted = time.monotonic()
            assert await raw.delete(MODE_KEY, API_KEYS_KEY) == 2
            while not (await raw.exists(MODE_KEY) and await raw.exists(API_KEYS_KEY)):
                said.append(await cli(stack.redis_url, "mode", "get"))
                assert time.monotonic() - deleted < 10, "not put back within 10 s"
            back = time.monotonic() - deleted
            after = len(load.results)
            await wait_until(lambda: len(load.results) > after + 10, what="requests after")
    finally:
        await raw.aclose()
    assert said and all("mode: core-only" in text for text in said), said
    assert {result for result in load.results} == {((200, None), (200, "shed_core_only"))}
    assert undecided_or_p2(gateway) == []
    audit = json.loads(await cli(stack.redis_url, "audit", "--output", "json"))
    assert audit[0]["kind"] == "put-back" and audit[0]["changes"][0]["field"] == "parts"
    await operators_state_is_whole(stack)
    print(f"the mode and the key index put back {back:.2f} s after they were deleted")
