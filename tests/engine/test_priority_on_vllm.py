"""vLLM's own scheduler ordered by the sidecar's tiers: with the engine under
--scheduling-policy priority and engine.send_priority on, a P0 request sent behind a
queue of P2 requests gets its first token before them, whatever priority the P2 clients
asked for themselves (body `priority`, X-Vllm-Priority); with send_priority off, the
engine serves them as they came."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from sidecar.tooling.engine import vllm
from tests.engine.conftest import idle, serving
from tests.engine.engine_client import until
from tests.engine.stacks import LOAD_SOURCES, stack_in_front
from tests.integration.helpers import failed_open

pytestmark = [pytest.mark.engine, pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p0": "vllm-prio-p0", "p2": "vllm-prio-p2"}
# The first seat comes free after 3 000 tokens, time enough to see the others queued
# behind it (vLLM's /metrics, which says they are queued, is slow while it decodes). The
# other seats stay taken until every request in line has had its first token: that one
# seat serves the line one at a time, in the engine's own order, and each answer in
# line holds it 1 500 tokens (~6 s here), far longer than the seconds for which the
# path from vLLM's API server to the client can stall and then hand over at once what
# came meanwhile. The session's engine holds 4 096 tokens a sequence: too few; this
# module's engine holds the tiny model's whole context.
RUNNING_TOKENS = (3_000, 8_000, 8_000, 8_000)
SETTINGS = vllm.EngineSettings(max_model_len=8_192, max_num_seqs=4)
WAITERS = 3
IN_LINE_TOKENS = 1_500
HOLDER_INTERVAL = 500  # tokens a chunk of a seat's holder
# Tiers as the test needs them: nothing shed for load (the seats are full on purpose),
# buckets far larger than these prompts; first tokens timed as the engine sent them
# (none sampled for TTFT, which would pass that stream's answer through the sidecar).
CONFIG = {
    "fleet": {"capacity_tokens_per_second": 10_000_000},
    "slo": {"ttft_sample_rate": 0},
    "tiers": {
        "p1": {"shed_below_free_kv": None},
        "p2": {"shed_below_free_kv": None, "shed_above_inflight": None},
    },
}


@pytest.fixture(scope="module")
def long_engine(tmp_path_factory):
    with serving(SETTINGS, tmp_path_factory.mktemp("long-engine")) as started:
        yield started


@pytest.fixture
def idle_long_engine(long_engine):
    return idle(long_engine)


@pytest.fixture(params=[(source, send) for source in LOAD_SOURCES for send in (True, False)])
def prio_stack(request, idle_long_engine, tmp_path):
    source, send_priority = request.param
    tenants = {f"tenant-{tier}": (tier, key) for tier, key in KEYS.items()}
    config = {**CONFIG, "engine": {"send_priority": send_priority}}
    with stack_in_front(idle_long_engine, tmp_path, source, tenants, config) as stack:
        yield stack, send_priority


async def chat(session, stack, tier: str, body: dict, headers: dict | None = None) -> float:
    """Send one request through Envoy; when its first token came (monotonic time), or,
    not streamed, its answer."""
    async with session.post(
        f"{stack.envoy_url}/v1/chat/completions",
        json={"model": "mock-llm", "stream": True, **body},
        headers={"Authorization": f"Bearer {KEYS[tier]}", **(headers or {})},
    ) as response:
        assert response.status == 200 and "x-qos-decision" not in response.headers
        if body.get("stream") is False:
            await response.read()
            return time.monotonic()
        first = None
        async for line in response.content:
            if first is None and line.startswith(b"data: {") and b'"content"' in line:
                first = time.monotonic()
        assert first is not None
        return first


@pytest.mark.timeout(600)
async def test_p0_sent_behind_p2_is_served_first_only_by_the_sidecar_s_priority(
    prio_stack, idle_long_engine
):
    stack, send_priority = prio_stack
    engine = idle_long_engine
    seats = engine.settings.max_num_seqs
    assert seats == len(RUNNING_TOKENS)
    # Every prompt made first: nothing may block the loop that times the first tokens.
    long_prompts = [engine.prompt_of(20, i) for i in range(seats)]
    waiter_prompts = [engine.prompt_of(20, 10 + i) for i in range(WAITERS)]
    p0_prompt = engine.prompt_of(20, 99)

    async def requests() -> tuple[float, float]:
        return await asyncio.to_thread(engine.requests)

    # No client gives up: the long answers take what the machine makes them take (the
    # test's own timeout bounds it).
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
        # The seats' holders streamed HOLDER_INTERVAL tokens a chunk: their thousands of
        # tokens cost vLLM's API server and this client next to nothing, and bytes still
        # flow within Envoy's stream idle timeout on a machine slowed by other work.
        running = [
            asyncio.create_task(
                chat(
                    session,
                    stack,
                    "p2",
                    {"messages": prompt, "max_tokens": tokens, "stream_interval": HOLDER_INTERVAL},
                )
            )
            for prompt, tokens in zip(long_prompts, RUNNING_TOKENS, strict=True)
        ]
        await until(lambda: engine.requests()[0] == seats, 60, "every seat taken")
        waiters = []
        for i, prompt in enumerate(waiter_prompts):
            # Each asks to go first, in the body and in vLLM's header.
            body = {"messages": prompt, "max_tokens": IN_LINE_TOKENS, "priority": -100 - i}
            waiters.append(
                asyncio.create_task(
                    chat(session, stack, "p2", body, {"X-Vllm-Priority": str(-100 - i)})
                )
            )
            queued = i + 1
            await until(lambda q=queued: engine.requests()[1] == q, 30, f"waiter {i} queued")
        p0 = asyncio.create_task(
            chat(session, stack, "p0", {"messages": p0_prompt, "max_tokens": IN_LINE_TOKENS})
        )
        await until(lambda: engine.requests()[1] == WAITERS + 1, 30, "P0 queued")
        assert (await requests())[0] == seats  # nothing ended before all were queued
        p0_first = await p0
        waiter_firsts = [await waiter for waiter in waiters]
        await asyncio.gather(*running)
    # Every request decided by the sidecar: one Envoy sent on undecided would carry its
    # client's own body priority.
    assert failed_open(stack) == 0
    if send_priority:
        assert all(p0_first < first for first in waiter_firsts), (p0_first, waiter_firsts)
    else:
        assert all(p0_first > first for first in waiter_firsts), (p0_first, waiter_firsts)
    # The waiters' own priorities changed nothing: they came in the order they were sent.
    assert waiter_firsts == sorted(waiter_firsts)
