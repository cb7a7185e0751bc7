"""Streams of an evictable tier ended early, well-formed, through real Envoy: one mock GPU
whose KV cache P2 streams fill, then P0 requests that wait in its queue for the memory.
With eviction on, the gateway ends P2's newest streams: each ends as the official client
expects (its finish_reason, the usage so far, [DONE]), the engine stops generating it
(Envoy resets the upstream), it is counted, and the P0 requests are served; no P0 stream
is ever ended."""

from __future__ import annotations

import asyncio

import openai
import pytest

from sidecar.request.answers.stream_end import EVICTED
from sidecar.tooling.stack.admin_client import scrape
from tests.integration.helpers import stack_with_tenants, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p0": "evict-p0", "p2": "evict-p2"}
# One GPU of 256 KV blocks (16 tokens each) scheduling by the priority the sidecar sends,
# decoding 20 ms a step.
GPU = (
    "--kv-cache-tokens",
    "4096",
    "--max-num-seqs",
    "8",
    "--decode-step-ms",
    "20",
    "--scheduling-policy",
    "priority",
)
# Three P2 streams of 1 300-token prompts take 246 blocks at once and grow past the rest.
P2_STREAMS = 3
P2_PROMPT_WORDS = 2_600
P2_TOKENS = 600  # 12 s of decoding each, unless ended
# Budgets far above these prompts: what holds P2 back here is its memory.
CONFIG = {
    "fleet": {"capacity_tokens_per_second": 10_000_000},
    # Below P1's watermark (8 % free): P1 is shed for the memory when P2 is evicted.
    "overload": {"evict_below_free_kv": 0.05},
    "engine": {"send_priority": True},
    "tiers": {"p0": {"max_prompt_tokens": None}, "p2": {"max_prompt_tokens": None}},
}


@pytest.fixture
def evicting_stack(tmp_path):
    tenants = {f"tenant-{tier}": (tier, key) for tier, key in KEYS.items()}
    with stack_with_tenants(tmp_path, tenants, replicas=1, mock_args=GPU, time_scale=1.0) as stack:
        stack.config.set(CONFIG)
        yield stack


def client(stack, tier: str, retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{stack.envoy_url}/v1", api_key=KEYS[tier], max_retries=retries
    )


async def stream(api: openai.AsyncOpenAI, words: int, max_tokens: int) -> list:
    chunks = []
    answer = await api.chat.completions.create(
        model="mock-llm",
        messages=[{"role": "user", "content": "x " * words}],
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    async for chunk in answer:
        chunks.append(chunk)
    return chunks


def finish(chunks: list) -> str | None:
    """The stream's finish_reason: its last chunk with a choice (a usage chunk has none)."""
    return next(c.choices[0].finish_reason for c in reversed(chunks) if c.choices)


def figure(url: str, key: str) -> float:
    return scrape(f"{url}/metrics").get(key, 0.0)


@pytest.mark.timeout(120)
async def test_p2_streams_end_well_formed_when_p0_needs_their_memory(evicting_stack):
    stack = evicting_stack
    engine = stack.engine_urls[0]
    # A batch client comes back after a shed (a busy machine's late report sheds P2 too).
    async with client(stack, "p2", retries=3) as p2, client(stack, "p0") as p0:
        batch = [
            asyncio.create_task(stream(p2, P2_PROMPT_WORDS, P2_TOKENS)) for _ in range(P2_STREAMS)
        ]
        running = 'vllm:num_requests_running{engine="0",model_name="mock-llm"}'
        waiting = 'vllm:num_requests_waiting{engine="0",model_name="mock-llm"}'

        def in_engine() -> bool:
            failed = [task.exception() for task in batch if task.done()]
            assert not failed, failed  # a P2 stream refused or broken before P0 came
            # The third may wait in the engine's queue for the memory the others grew into.
            return figure(engine, running) + figure(engine, waiting) == P2_STREAMS

        await wait_until(in_engine, what="P2 streams in the engine")
        payments = [asyncio.create_task(stream(p0, 50, 20)) for _ in range(4)]
        served = await asyncio.wait_for(asyncio.gather(*payments), 60)
        ended = await asyncio.wait_for(asyncio.gather(*batch), 60)
    evicted = [chunks for chunks in ended if finish(chunks) == EVICTED]
    assert evicted, [(finish(c), len(c), c[-1].usage) for c in ended]
    for chunks in evicted:
        # Parsed to its end: the closing chunk names why, with the engine's count so far.
        last = chunks[-1]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert last.usage is not None and last.usage.completion_tokens > 0
        assert last.usage.completion_tokens < P2_TOKENS and text
    for chunks in served:
        assert finish(chunks) == "length"  # P0 is never ended: each runs to max_tokens
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    counted = samples.get('qos_evictions_total{pool="default",tier="p2"}', 0.0)
    assert counted == len(evicted)
    assert samples.get('qos_evictions_total{pool="default",tier="p0"}', 0.0) == 0
    # The engine stopped generating the ended streams: nothing runs once all is answered.
    await wait_until(lambda: figure(engine, running) == 0, what="the engine idle")
