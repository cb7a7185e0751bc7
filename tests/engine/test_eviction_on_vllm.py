"""Streams ended early on vLLM itself: P2 streams fill vLLM's KV cache; below the eviction
line, with P1 shed for the memory, the gateway ends P2's newest streams. Each ends
well-formed as the official client reads it (finish_reason, the usage so far, [DONE]),
vLLM stops running it within a second of the gateway's decision, and the P0 requests sent
after are served to the end, none of them ended."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path

import openai
import pytest

from sidecar.request.answers.stream_end import EVICTED
from sidecar.tooling.engine import vllm
from tests.engine.conftest import idle, serving
from tests.engine.engine_client import until
from tests.engine.stacks import stack_in_front

pytestmark = [pytest.mark.engine, pytest.mark.integration, pytest.mark.asyncio]

# 129 KV blocks of 32 tokens (vLLM takes no less than one whole context): three P2
# streams of 500-token prompts take a third of them at once, fill them after some 900
# tokens each, and would need three times the whole to answer in full: seconds of
# decoding, several of the engine's reports.
# vLLM preempts a stream when its cache is full and holds it back until there is room for
# all of it again, so its use saws between about half and full, and passes the last few
# percent in a fraction of a second, often between two reports: the lines are set where
# its use passes for seconds on its way up (the shedding and eviction lines' order is
# the defaults').
SETTINGS = vllm.EngineSettings(max_model_len=4_096, max_num_seqs=6, kv_cache_tokens=4_096)
P2_STREAMS = 3
P2_PROMPT = 500
P2_TOKENS = 3_500
KEYS = {"p0": "vllm-evict-p0", "p2": "vllm-evict-p2"}
CONFIG = {
    "fleet": {"capacity_tokens_per_second": 10_000_000},
    # Below P1's watermark: P1 is shed for the memory when P2 is ended.
    "overload": {"evict_below_free_kv": 0.40},
    "engine": {"send_priority": True},
    "slo": {"ttft_sample_rate": 0},
    "tiers": {
        "p1": {"shed_below_free_kv": 0.45},
        "p2": {"max_prompt_tokens": None, "shed_below_free_kv": 0.50},
    },
}


@pytest.fixture(scope="module")
def small_kv_engine(tmp_path_factory):
    with serving(SETTINGS, tmp_path_factory.mktemp("small-kv-engine")) as started:
        yield started


@pytest.fixture
def evicting_stack(small_kv_engine, tmp_path):
    engine = idle(small_kv_engine)
    tenants = {f"tenant-{tier}": (tier, key) for tier, key in KEYS.items()}
    with stack_in_front(engine, tmp_path, "push", tenants, CONFIG) as stack:
        yield stack, engine


async def stream(api: openai.AsyncOpenAI, messages: list[dict], max_tokens: int) -> list:
    """Its chunks."""
    chunks = []
    answer = await api.chat.completions.create(
        model="mock-llm",
        messages=messages,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in answer:
        chunks.append(chunk)
    return chunks


def decided_at(log: Path) -> float:
    """When the sidecar first decided to end streams (its log line's time, epoch
    seconds, to the millisecond)."""
    for line in log.read_text().splitlines():
        entry = json.loads(line) if line.startswith("{") else {}
        if entry.get("message") == "streams ended early for the tiers above":
            return datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()
    raise AssertionError("the sidecar logged no decision to end streams")


async def watch(unfinished, seen: list[tuple[float, float]]) -> None:
    """vLLM's unfinished requests, looked at as often as its /metrics answers: (epoch
    seconds the answer came, the count)."""
    while True:
        count = await asyncio.to_thread(unfinished)
        seen.append((time.time(), count))


def finish(chunks: list) -> str | None:
    return next(c.choices[0].finish_reason for c in reversed(chunks) if c.choices)


@pytest.mark.timeout(600)
async def test_p2_streams_are_ended_well_formed_and_vllm_drops_them(evicting_stack):
    stack, engine = evicting_stack
    prompts = [engine.prompt_of(P2_PROMPT, i) for i in range(P2_STREAMS)]
    payments = [engine.prompt_of(30, 50 + i) for i in range(4)]

    def unfinished() -> float:
        running, waiting = engine.requests()
        return running + waiting

    apis = {
        tier: openai.AsyncOpenAI(
            base_url=f"{stack.envoy_url}/v1", api_key=key, max_retries=0, timeout=300
        )
        for tier, key in KEYS.items()
    }
    seen: list[tuple[float, float]] = []
    async with apis["p2"] as p2, apis["p0"] as p0:
        batch = [asyncio.create_task(stream(p2, prompt, P2_TOKENS)) for prompt in prompts]
        await until(lambda: unfinished() == P2_STREAMS, 120, "the P2 streams in vLLM")
        watching = asyncio.create_task(watch(unfinished, seen))
        done, _ = await asyncio.wait(batch, return_when=asyncio.FIRST_COMPLETED, timeout=300)
        chunks = next(iter(done)).result()
        assert finish(chunks) == EVICTED, chunks[-2:]
        decision = decided_at(stack.process("sidecar").log_path)
        await until(
            lambda: any(at > decision and count < P2_STREAMS for at, count in seen),
            30,
            "vLLM dropping the stream",
        )
        watching.cancel()
        served = await asyncio.gather(*(stream(p0, m, 20) for m in payments))
        ended = await asyncio.gather(*batch)
    # The first look after the decision that found fewer: an upper bound of the drop.
    dropped = next(at for at, count in seen if at > decision and count < P2_STREAMS)
    print(
        f"vLLM dropped the first stream ended {(dropped - decision) * 1000:.0f} ms after "
        "the gateway decided to end it"
    )
    assert dropped - decision <= 1.0, seen
    for chunks in ended:
        if finish(chunks) == EVICTED:
            closing = chunks[-1]
            assert closing.choices == [] and closing.usage.completion_tokens > 0
    for chunks in served:
        assert finish(chunks) == "length"  # P0 is never ended: each runs to max_tokens
