"""The sidecar killed under load. In normal mode Envoy fails open: P0 is still served,
and QoS is back once the sidecar is. In core-only Envoy fails closed on the mode the
sidecar gave it: nothing reaches the GPUs undecided, and P0 is back with the sidecar."""

from __future__ import annotations

import asyncio
import signal
import time

import aiohttp
import pytest

from sidecar.tooling.stack import readiness
from tests.integration.helpers import (
    SteadyLoad,
    chat_once,
    envoy_figure,
    stack_with_tenant,
    stack_with_tenants,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

P0_KEY = "crash-p0"
P2_KEY = "crash-p2"


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


@pytest.fixture
def core_only_stack(tmp_path):
    keys = {"crash-pay": ("p0", P0_KEY), "crash-batch": ("p2", P2_KEY)}
    with stack_with_tenants(tmp_path, keys) as stack:
        yield stack


@pytest.mark.timeout(120)
async def test_core_only_outlives_the_sidecar_and_p0_is_back_with_it(core_only_stack):
    stack = core_only_stack
    stack.config.mode("core-only")
    # Envoy holds the mode itself, from the sidecar's runtime layer.
    await wait_until(lambda: envoy_figure(stack, "qos.core_only") == "100", what="the layer")
    async with aiohttp.ClientSession() as session:
        assert await chat_once(session, stack.envoy_url, P0_KEY) == (200, None)
        assert await chat_once(session, stack.envoy_url, P2_KEY) == (
            200,
            "shed_core_only",
        )  # its fallback

        stack.process("sidecar").send_signal(signal.SIGKILL)  # its only process
        await wait_until(lambda: not readiness.grpc_serving(stack.sidecar_grpc))
        upstream = envoy_figure(stack, "cluster.vllm.upstream_rq_total")
        answers = []
        for _ in range(20):
            for key in (P2_KEY, P0_KEY):
                answers.append(await chat_once(session, stack.envoy_url, key, header="x-qos"))
        # Nothing undecided reaches the GPUs: P2 not, and P0 not either until the sidecar
        # is back to tell it from P2.
        assert {status for status, _ in answers} == {503}
        assert envoy_figure(stack, "cluster.vllm.upstream_rq_total") == upstream
        async with session.post(
            f"{stack.envoy_url}/v1/chat/completions", json={"messages": []}
        ) as refused:
            assert (await refused.json())["error"]["code"] == "qos_unavailable"

        restarted = time.monotonic()
        stack.restart_sidecar()
        while (await chat_once(session, stack.envoy_url, P0_KEY))[0] != 200:
            assert time.monotonic() - restarted < 30, "P0 not served again"
            await asyncio.sleep(0.05)
        back = time.monotonic() - restarted
        assert await chat_once(session, stack.envoy_url, P2_KEY) == (
            200,
            "shed_core_only",
        )  # its fallback
    print(f"P0 served again {back:.2f} s after the sidecar was started again")
    stack.config.mode("normal")
    await wait_until(lambda: envoy_figure(stack, "qos.core_only") == "0", what="normal again")
