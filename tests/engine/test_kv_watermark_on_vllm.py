"""Shedding on the real engine's KV cache: long requests fill vLLM's blocks, its metrics
say so (pushed by a reporter, or scraped by the sidecar), P2 is shed through Envoy; when
they end, the blocks are freed and P2 is admitted again."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import aiohttp
import pytest

from tests.engine.engine_client import until
from tests.engine.stacks import LOAD_SOURCES, stack_in_front
from tests.integration.helpers import chat_once, scrape

pytestmark = [pytest.mark.engine, pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p0": "vllm-kv-p0", "p2": "vllm-kv-p2"}
# P2 shed below 85 % free. Four 1 000-token prompts take 25 % of the blocks, any three
# 19 %: while one filler's next request replaces the one that ended, the KV stays full.
WATERMARK = 0.85
FILLERS, FILLER_TOKENS = 4, 1_000
STAGGER = 400  # tokens: each filler's answers this much shorter than the one before


@pytest.fixture(params=LOAD_SOURCES)
def kv_stack(request, idle_engine, tmp_path):
    tenants = {f"tenant-{tier}": (tier, key) for tier, key in KEYS.items()}
    config = {
        "tiers": {"p1": {"shed_below_free_kv": None}, "p2": {"shed_below_free_kv": WATERMARK}}
    }
    with stack_in_front(idle_engine, tmp_path, request.param, tenants, config) as stack:
        yield stack


async def fill(engine, prompts: list[list[dict]], shorter_by: int) -> None:
    """Long streams sent straight to the engine (another gateway's traffic), one after
    another until cancelled: the tiny model answers one in seconds, the KV stays full.
    Each filler's answers are `shorter_by` tokens shorter than the longest, so that the
    fillers do not end at once."""
    body = {
        "model": engine.settings.served_model,
        "max_tokens": engine.settings.max_model_len - FILLER_TOKENS - shorter_by,
        "stream": True,
    }
    async with aiohttp.ClientSession() as session:
        for messages in itertools.cycle(prompts):
            chat = {**body, "messages": messages}
            async with session.post(f"{engine.url}/v1/chat/completions", json=chat) as response:
                assert response.status == 200
                async for _ in response.content:
                    pass


async def p2_probe(stack) -> str:
    """What a one-token P2 request gets through Envoy: admitted, or the shed's reason (a
    shed P2 gets its fallback, a completion, with the reason in x-qos-decision)."""
    body = {"model": "mock-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    async with aiohttp.ClientSession() as session:
        status, decision = await chat_once(session, stack.envoy_url, KEYS["p2"], body)
    assert status == 200
    return decision or "admit"


def free_kv(stack) -> float:
    return scrape(f"{stack.sidecar_admin_url}/metrics").get("qos_cluster_free_kv_ratio{}", -1)


def p2_shed(stack) -> bool:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return samples.get('qos_overload_shedding{rule="shed_kv_watermark",tier="p2"}') == 1


@pytest.mark.timeout(600)
async def test_p2_is_shed_while_the_engine_s_kv_is_full_and_admitted_after(kv_stack, idle_engine):
    engine = idle_engine
    assert await p2_probe(kv_stack) == "admit"
    # Distinct prompts, so that no filler's blocks are another's cached prefix.
    prompts = [
        [engine.prompt_of(FILLER_TOKENS, FILLERS * turn + filler) for turn in range(2)]
        for filler in range(FILLERS)
    ]
    fillers = [
        asyncio.create_task(fill(engine, mine, shorter_by=STAGGER * index))
        for index, mine in enumerate(prompts)
    ]
    try:
        await until(lambda: engine.kv_usage() > 1 - WATERMARK + 0.02, 60, "the engine filled")
        await until(lambda: p2_shed(kv_stack), 30, "the sidecar saw the engine's KV")
        assert 0 <= free_kv(kv_stack) < WATERMARK
        assert await p2_probe(kv_stack) == "shed_kv_watermark"
    finally:
        for filler in fillers:
            filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await filler
    left = engine.metric("vllm:generation_tokens_total")
    # The clients left: vLLM aborts them and frees their blocks; the sidecar sees it.
    await until(lambda: engine.kv_usage() == 0, 60, "the engine freed the fillers' blocks")
    await until(lambda: not p2_shed(kv_stack), 30, "P2 no longer shed")
    assert await p2_probe(kv_stack) == "admit"
    # Aborted, not run to their end: after the clients left, the engine made less than
    # half of what their answers had still to run.
    made = engine.metric("vllm:generation_tokens_total") - left
    longest = engine.settings.max_model_len - FILLER_TOKENS
    assert made < sum(longest - STAGGER * index for index in range(FILLERS)) / 2, made
