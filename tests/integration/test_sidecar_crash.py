"""The sidecar killed under load with Envoy failing open: P0 is still served, and QoS is
back once the sidecar is."""

from __future__ import annotations

import asyncio
import signal

import pytest

from sidecar.tooling.stack import readiness
from tests.integration.helpers import SteadyLoad, chat_once, stack_with_tenant, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

P0_KEY = "crash-p0"


@pytest.fixture(scope="module")
def crash_stack(tmp_path_factory):
    with stack_with_tenant(tmp_path_factory.mktemp("crash"), "crash-pay", "p0", P0_KEY) as stack:
        yield stack


@pytest.mark.timeout(90)
async def test_p0_is_served_while_the_sidecar_is_down_and_qos_returns_with_it(crash_stack):
    stack = crash_stack

    def p0(session):  # status, and the tier the GPU saw (None: it passed without QoS)
        return chat_once(session, stack.envoy_url, P0_KEY, header="x-mock-saw-x-qos-tier")

    async with SteadyLoad(p0) as load:
        results = load.results
        await wait_until(lambda: len(results) >= 20)
        assert all(tier == "p0" for _, tier in results)

        stack.process("sidecar").send_signal(signal.SIGKILL)
        await wait_until(lambda: not readiness.grpc_serving(stack.sidecar_grpc))
        down_from = len(results)
        await asyncio.sleep(2)
        down = results[down_from:]
        assert len(down) >= 20 and {status for status, _ in down} == {200}
        assert any(tier is None for _, tier in down)  # Envoy failed open: no QoS, served

        stack.restart_sidecar()
        back_from = len(results)
        await wait_until(
            lambda: any(t == "p0" for _, t in results[back_from:]), within=10, what="QoS back"
        )
    assert {status for status, _ in results} == {200}  # not one P0 request failed
