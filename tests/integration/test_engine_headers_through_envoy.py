"""What vLLM schedules by, through real Envoy: a client's X-Vllm-Priority (any case) and
X-data-parallel-rank never reach the GPU, with or without the sidecar in the path; the
tier's priority does, and under contention P0 is still served before a P2 that asked to
jump the queue. The sidecar warns when it sends priorities to pods that may ignore them."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from multidict import CIMultiDict

from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.stack import start_envoy
from tests.integration.helpers import scrape, stack_with_tenants, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p0": "engine-p0", "p2": "engine-p2"}
SPOOFS = (
    {"X-Vllm-Priority": "-100", "X-data-parallel-rank": "1"},
    {"x-vllm-priority": "-100"},
    {"X-VLLM-PRIORITY": "-100", "X-DATA-PARALLEL-RANK": "0"},
)
SAW_ENGINE_HEADERS = ("x-mock-saw-x-vllm-priority", "x-mock-saw-x-data-parallel-rank")


@pytest.fixture(scope="module")
def engine_stack(tmp_path_factory):
    """One mock GPU with vLLM's priority scheduling and a single seat, so that requests
    wait in the engine's own queue and its order shows."""
    with stack_with_tenants(
        tmp_path_factory.mktemp("engine-stack"),
        {f"engine-{tier}": (tier, key) for tier, key in KEYS.items()},
        replicas=1,
        mock_args=("--scheduling-policy", "priority", "--max-num-seqs", "1"),
    ) as stack:
        yield stack


@pytest.fixture
def config(engine_stack):
    config = engine_stack.config
    yield config
    config.set({})


def chat(tokens: int = 1) -> dict:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens}
    return {**body, "ignore_eos": True}


async def send(session, url, tier, headers=None, body=None) -> dict[str, str]:
    """One request as `tier`, with extra headers; the response headers."""
    all_headers = CIMultiDict({"Authorization": f"Bearer {KEYS[tier]}"})
    all_headers.extend(headers or {})
    async with session.post(
        f"{url}/v1/chat/completions", json=body or chat(), headers=all_headers
    ) as response:
        assert response.status == 200, await response.text()
        await response.read()
        return dict(response.headers)


async def test_a_clients_engine_headers_never_reach_vllm(engine_stack, config):
    async with aiohttp.ClientSession() as session:
        for spoof in SPOOFS:
            seen = await send(session, engine_stack.envoy_url, "p2", spoof)
            assert not set(SAW_ENGINE_HEADERS) & set(seen), seen
            assert "x-mock-saw-priority" not in seen  # no priority at all reached vLLM
        config.set({"engine": {"send_priority": True}})
        for spoof in SPOOFS:
            seen = await send(session, engine_stack.envoy_url, "p2", spoof)
            # The tier's priority, in the header vLLM reads before the body.
            assert seen["x-mock-saw-x-vllm-priority"] == "2"
            assert seen["x-mock-saw-priority"] == "2"
            assert "x-mock-saw-x-data-parallel-rank" not in seen


async def test_under_contention_p0_runs_before_a_p2_that_asked_to_jump(engine_stack, config):
    config.set({"engine": {"send_priority": True}})
    mock = engine_stack.engine_urls[0]
    waiting = 'vllm:num_requests_waiting{engine="0",model_name="mock-llm"}'
    served: list[str] = []

    async def one(session, tier, headers=None):
        # 40 tokens: the engine's one seat serves them 50 ms apart, an order that shows.
        await send(session, engine_stack.envoy_url, tier, headers, chat(40))
        served.append(tier)

    async with aiohttp.ClientSession() as session:
        busy = {**chat(400), "stream": True}  # ~0.5 s holding the engine's one seat
        async with session.post(
            f"{engine_stack.envoy_url}/v1/chat/completions",
            json=busy,
            headers={"Authorization": f"Bearer {KEYS['p0']}"},
        ) as running:
            await running.content.readline()
            jumper = asyncio.create_task(one(session, "p2", {"X-Vllm-Priority": "-100"}))
            await wait_until(lambda: scrape(f"{mock}/metrics")[waiting] == 1, what="P2 waits")
            payment = asyncio.create_task(one(session, "p0"))
            await wait_until(lambda: scrape(f"{mock}/metrics")[waiting] == 2, what="P0 waits")
            await running.read()
        await asyncio.gather(jumper, payment)
    # P2 came first and asked for -100; the engine saw its tier's 2 and served P0 first.
    assert served == ["p0", "p2"]


async def test_without_the_sidecar_envoy_still_drops_them(engine_stack, tmp_path):
    """Envoy fails open when the sidecar is unreachable: its own filter strips the
    headers before ext_proc, so such a request carries none either."""
    port, admin = free_port(), free_port()
    gateway = engine_stack.envoy_config(port, admin)
    for cluster in gateway["static_resources"]["clusters"]:
        if cluster["name"] == "qos_sidecar":  # nobody listens there
            endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
            endpoint["endpoint"]["address"]["socket_address"]["port_value"] = free_port()
    envoy = start_envoy(gateway, tmp_path, admin, name="envoy-no-sidecar", concurrency=1)
    try:
        async with aiohttp.ClientSession() as session:
            for spoof in SPOOFS:
                seen = await send(session, f"http://127.0.0.1:{port}", "p2", spoof)
                assert "x-mock-saw-x-qos-tier" not in seen  # the sidecar never decided
                assert not set(SAW_ENGINE_HEADERS) & set(seen), seen
    finally:
        envoy.stop()


def unconfirmed(stack, policy: str) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return samples[f'qos_engine_priority_unconfirmed_pods{{policy="{policy}"}}']


async def test_priorities_sent_to_pods_that_may_ignore_them_are_warned_of(
    engine_stack, config, start_process
):
    config.set({"engine": {"send_priority": True}})
    # The stack's reporter says what its mock runs: priority. Nothing to warn of.
    await wait_until(lambda: unconfirmed(engine_stack, "fcfs") == 0)
    assert unconfirmed(engine_stack, "unknown") == 0
    # A pod whose reporter says fcfs, and one whose reporter was not told.
    for pod, policy in (("pod-fcfs", "fcfs"), ("pod-untold", "")):
        start_process(
            pod,
            "report",
            "--vllm-url",
            engine_stack.engine_urls[0],
            "--sidecar",
            engine_stack.sidecar_grpc,
            "--pod-id",
            pod,
            "--interval",
            "0.1",
            f"--scheduling-policy={policy}",
            ready=lambda: True,
            env=engine_stack.reporter_env,
        )
    await wait_until(lambda: readiness.pods_reporting(engine_stack.sidecar_admin_url) == 3)
    await wait_until(lambda: unconfirmed(engine_stack, "fcfs") == 1, what="fcfs named")
    assert unconfirmed(engine_stack, "unknown") == 1
    log = engine_stack.process("sidecar").log_path.read_text()
    assert "do not report priority scheduling" in log and "pod-fcfs" in log
    config.set({"engine": {"send_priority": False}})  # no priorities sent: nothing to warn of
    await wait_until(lambda: unconfirmed(engine_stack, "fcfs") == 0, what="cleared")
