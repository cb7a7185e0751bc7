"""llama.cpp's llama-server (its current release, built here) behind the gateway: what the
sidecar admits, it answers; its own /metrics, read in llama.cpp's dialect (pushed by a
reporter, or scraped by the sidecar), shed P2 by the in-flight rule while a backlog sent
behind the gateway's back waits for its slots (the release has no KV gauge), and P2 is
admitted again once the backlog has gone."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from sidecar.tooling.engine import llamacpp
from sidecar.tooling.stack.stack import RunningEngines
from tests.engine.engine_client import until
from tests.engine.stacks import LOAD_SOURCES, stack_in_front
from tests.integration.helpers import chat_once, failed_open, scrape

pytestmark = [pytest.mark.engine, pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p0": "llama-p0", "p2": "llama-p2"}
SETTINGS = llamacpp.ServerSettings(slots=4, context=16_384)  # 4 096 tokens a slot
MAX_CONCURRENCY = 10  # P2 shed above 8 in flight
BACKLOG = 2 * MAX_CONCURRENCY  # each runs ~4 000 tokens: seconds a slot, the rest wait


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    with llamacpp.serving(SETTINGS, tmp_path_factory.mktemp("llama-server")) as (url, _):
        yield url


@pytest.fixture(params=LOAD_SOURCES)
def llama_stack(request, llama_server, tmp_path):
    tenants = {f"tenant-{tier}": (tier, key) for tier, key in KEYS.items()}
    config = {"fleet": {"max_concurrency": MAX_CONCURRENCY}}
    engines = RunningEngines((llama_server,), "fcfs")
    with stack_in_front(engines, tmp_path, request.param, tenants, config) as stack:
        yield stack


def sidecar_metric(stack, name: str) -> float | None:
    return scrape(f"{stack.sidecar_admin_url}/metrics").get(name)


async def probe(stack, tier: str) -> str:
    """What a one-token request of `tier` gets through Envoy: admitted (and answered by
    llama-server), or the shed's reason."""
    body = {"model": SETTINGS.served_model, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        status, decision = await chat_once(
            session, stack.envoy_url, KEYS[tier], {**body, "max_tokens": 1}
        )
    assert status == 200
    return decision or "admit"


async def backlog(url: str, index: int) -> None:
    """A long stream sent straight to llama-server: another gateway's traffic."""
    body = {
        "model": SETTINGS.served_model,
        "messages": [{"role": "user", "content": f"{index} buy buy"}],
        "max_tokens": SETTINGS.context // SETTINGS.slots - 64,
        "stream": True,
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/chat/completions", json=body) as response,
    ):
        assert response.status == 200
        async for _ in response.content:
            pass


@pytest.mark.timeout(300)
async def test_llama_server_s_own_load_sheds_p2_by_the_in_flight_rule(llama_stack, llama_server):
    stack = llama_stack
    in_flight = "qos_cluster_requests_in_flight{}"
    await until(lambda: sidecar_metric(stack, "qos_pods_reporting{}") == 1, 30, "the pod reports")
    assert await probe(stack, "p2") == "admit"
    streams = [asyncio.create_task(backlog(llama_server, i)) for i in range(BACKLOG)]
    try:
        # Only llama-server's metrics can tell the sidecar of this load.
        await until(
            lambda: (sidecar_metric(stack, in_flight) or 0) > 0.8 * MAX_CONCURRENCY,
            30,
            "llama-server's busy slots and deferred requests reported",
        )
        assert sidecar_metric(stack, "qos_cluster_free_kv_ratio{}") is None
        assert await probe(stack, "p2") == "shed_inflight"
    finally:
        for stream in streams:
            stream.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stream
    # The streams' clients have gone: llama-server drops them, its slots come free.
    await until(lambda: sidecar_metric(stack, in_flight) == 0, 30, "llama-server idle")
    assert await probe(stack, "p2") == "admit"
    assert failed_open(stack) == 0
