"""Redis killed under load: P0 keeps being served, budgets go local, then shared again
within a second of Redis coming back."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from sidecar.tooling.stack.readiness import redis_ping
from sidecar.tooling.stack.redis_servers import start_redis_server
from tests.integration.helpers import (
    SteadyLoad,
    budgets_local,
    chat_once,
    scrape,
    stack_with_tenant,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

P0_KEY = "outage-p0"


@pytest.fixture(scope="module")
def outage_stack(tmp_path_factory):
    with stack_with_tenant(tmp_path_factory.mktemp("outage"), "outage-pay", "p0", P0_KEY) as stack:
        yield stack


@pytest.mark.timeout(90)
async def test_redis_killed_for_five_seconds_under_load(outage_stack):
    stack = outage_stack
    redis_name = stack.redis_process_name
    port = stack.options.redis_port
    async with SteadyLoad(lambda session: chat_once(session, stack.envoy_url, P0_KEY)) as load:
        results = load.results
        await asyncio.sleep(1)
        assert not budgets_local(stack)
        stack.process(redis_name).send_signal(signal.SIGKILL)
        await wait_until(lambda: not redis_ping(stack.redis_url), what="Redis gone")
        await asyncio.sleep(1)  # the first decisions after the kill have found out
        assert budgets_local(stack)
        during = len(results)
        await asyncio.sleep(4)
        assert len(results) > during + 50  # P0 kept flowing while Redis was away

        stack.processes.append(start_redis_server(stack.options.work_dir, port))
        back_at = time.monotonic()
        await wait_until(lambda: not budgets_local(stack), within=3, what="shared budgets")
        assert time.monotonic() - back_at <= 1.0
        await asyncio.sleep(1)

    assert stack.process("sidecar").running()  # no crash
    failed = [r for r in results if r != (200, None)]
    assert failed == [], failed[:5]  # every P0 request served, none shed or failed
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    assert samples['qos_redis_errors_total{component="limiter"}'] >= 1
    assert samples["qos_budget_mode_switches_total{}"] >= 2
