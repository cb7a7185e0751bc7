"""Redis killed and restarted empty under traffic: the sidecars put back what they hold,
and nothing an operator set is lost."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
import redis.asyncio as aioredis

from sidecar.config import recovery
from sidecar.tooling.stack.readiness import redis_ping
from sidecar.tooling.stack.redis_servers import start_redis_server
from sidecar.tooling.stack.stack import Stack, StackOptions
from tests.integration.helpers import SteadyLoad, chat_once, cli, scrape, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

P0_KEY, P2_KEY = "amnesia-p0", "amnesia-p2"


@pytest.fixture(scope="module")
def amnesia_stack(tmp_path_factory):
    options = StackOptions.on_free_ports(
        tmp_path_factory.mktemp("amnesia"), time_scale=0.05, envoy_concurrency=1
    )
    with Stack(options) as stack:
        yield stack


async def until_in_place(redis_url: str) -> float:
    """Seconds until Redis holds a configuration with an identity again."""
    client = aioredis.Redis.from_url(redis_url)
    started = time.monotonic()
    try:
        while True:
            state = await recovery.read_state(client)
            if state.identity and state.has_document:
                return time.monotonic() - started
            assert time.monotonic() - started < 20, state
            await asyncio.sleep(0.01)
    finally:
        await client.aclose()


@pytest.mark.timeout(120)
async def test_redis_restarted_empty_forgets_no_tenant_key_or_switch(amnesia_stack):
    stack = amnesia_stack
    url = stack.redis_url
    await cli(url, "tenants", "add", "pay", "--tier", "p0", "--api-key", P0_KEY)
    await cli(url, "tenants", "add", "bulk", "--tier", "p2", "--api-key", P2_KEY)
    await cli(url, "mode", "set", "core-only", "--by", "duty")

    async def both(session):
        p0 = await chat_once(session, stack.envoy_url, P0_KEY)
        p2 = await chat_once(session, stack.envoy_url, P2_KEY)
        return p0, p2

    # What core-only does, in force before Redis goes: payments served, batch shed.
    async with SteadyLoad(both, clients=2) as before:
        await wait_until(lambda: len(before.results) > 20, what="requests before")
    assert {result for result in before.results} == {((200, None), (200, "shed_core_only"))}

    async with SteadyLoad(both, clients=2) as load:
        await wait_until(lambda: len(load.results) > 10, what="requests flowing")
        stack.process(stack.redis_process_name).send_signal(signal.SIGKILL)
        await wait_until(lambda: not redis_ping(url), what="Redis gone")
        await asyncio.sleep(2)  # a gap with traffic; then it comes back, empty
        stack.processes.append(start_redis_server(stack.options.work_dir, stack.options.redis_port))
        put_back_in = await until_in_place(url)
        during = len(load.results)
        await wait_until(lambda: len(load.results) > during + 20, what="requests after")

    mode = await cli(url, "mode", "get")
    tenants = await cli(url, "tenants", "list")
    assert "mode: core-only" in mode
    assert "pay" in tenants and "p0" in tenants and "bulk" in tenants
    # Every payment served as P0 and every batch request shed, all through.
    assert {result for result in load.results} == {((200, None), (200, "shed_core_only"))}
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    assert samples["qos_config_put_back_total{}"] == 1
    assert put_back_in < 5, put_back_in
    print(f"configuration put back {put_back_in:.2f} s after Redis came back empty")
