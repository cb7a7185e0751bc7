"""A client that leaves a whole (non-streamed) answer before it comes: the disconnect
reaches the engine, which stops, and the tenant is charged all the answer asked for,
never less than the engine made, though its buckets reserved less."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.integration.helpers import settled, stack_with_tenants, wait_until
from tests.integration.stand_in_picker import generated

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY = "sk-abandon"
TOKENS = 4_000


@pytest.mark.timeout(120)
async def test_a_client_leaving_a_whole_answer_pays_for_it_all_and_the_engine_stops(tmp_path):
    # 4 000 tokens in about 5 s (one GPU, 1.25 ms a decode step); a burst far smaller.
    with stack_with_tenants(tmp_path, {}, replicas=1, time_scale=0.05) as stack:
        stack.config.tenant("left", "p1", KEY, rate_tokens_per_second=400, burst_seconds=3)
        stack.config.set({"tiers": {"p1": {"output_weight": 1.0}}})
        engine = stack.engine_urls[0]
        before, made_before = settled(stack, "abandoned"), generated(engine)
        body = {
            "model": "mock-llm",
            "messages": [{"role": "user", "content": "tell me everything"}],
            "max_tokens": TOKENS,
            "ignore_eos": True,
        }
        async with aiohttp.ClientSession() as session:

            async def ask() -> None:
                async with session.post(
                    f"{stack.envoy_url}/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {KEY}"},
                ) as answer:
                    await answer.read()

            asking = asyncio.ensure_future(ask())
            # The client leaves about a fifth of the way through (its connection closes).
            await wait_until(lambda: generated(engine) - made_before >= TOKENS / 5, 30, "a fifth")
            asking.cancel()
        left_at = time.monotonic()
        # The engine stops within a second of the client leaving: no token decoded over a
        # tenth of a second, measured as it goes.
        last = generated(engine)
        while True:
            await asyncio.sleep(0.1)
            now = generated(engine)
            if now == last:
                break
            last = now
            assert time.monotonic() - left_at < 5, "the engine never stopped"
        assert time.monotonic() - left_at - 0.1 < 1.0
        made = generated(engine) - made_before
        assert TOKENS / 5 <= made < TOKENS / 2
        await wait_until(lambda: settled(stack, "abandoned") > before, 10, "settled")
        charged = settled(stack, "abandoned") - before
        assert charged == TOKENS >= made  # all it asked for: never less than it made
