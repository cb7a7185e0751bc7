"""A client's own limit on its wait, through real Envoy and the official openai client:
answered at once when it will not wait, its tier's fallback when its shorter wait runs
out, served when a slot frees in time, and ahead of its tier's others whose wait ends
later. The header never reaches the engine."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import pytest
from openai import AsyncOpenAI

from sidecar.request.queueing.waiting import MAX_WAIT_HEADER
from tests.integration.helpers import stack_with_tenants, wait_until
from tests.integration.test_queueing_through_envoy import chat, sidecar_gauges

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p1": "w-p1"}
FALLBACK = "We are serving many users right now."


@pytest.fixture(scope="module")
def wait_stack(tmp_path_factory):
    with stack_with_tenants(
        tmp_path_factory.mktemp("wait-stack"),
        {"wait-p1": ("p1", KEYS["p1"])},
        time_scale=0.02,
    ) as stack:
        stack.config.set({"fleet": {"max_concurrency": 1}})
        yield stack


@contextlib.asynccontextmanager
async def the_one_slot_held(session, stack):
    """A long stream holds the only slot until the block ends (its client leaves)."""
    async with session.post(
        f"{stack.envoy_url}/v1/chat/completions",
        json=chat(20_000, stream=True),
        headers={"Authorization": f"Bearer {KEYS['p1']}"},
    ) as holder:
        assert "x-qos-decision" not in holder.headers  # admitted, not shed
        await holder.content.readline()
        assert sidecar_gauges(stack)[0] == 1
        yield
    await wait_until(lambda: sidecar_gauges(stack) == (0, 0), what="all given back")


async def ask(client: AsyncOpenAI, wait_ms: int | None) -> tuple[str | None, str, dict]:
    """(x-qos-decision, the answer's text, what the engine saw) of one short request."""
    headers = {} if wait_ms is None else {MAX_WAIT_HEADER: str(wait_ms)}
    raw = await client.chat.completions.with_raw_response.create(
        model="mock-llm",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=3,
        extra_headers=headers,
    )
    completion = raw.parse()
    return raw.headers.get("x-qos-decision"), completion.choices[0].message.content, raw.headers


def client_of(stack) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{stack.envoy_url}/v1", api_key=KEYS["p1"], max_retries=0)


async def test_a_client_that_will_not_wait_or_not_long_gets_the_fallback(wait_stack):
    async with (
        client_of(wait_stack) as client,
        aiohttp.ClientSession() as session,
        the_one_slot_held(session, wait_stack),
    ):
        started = time.monotonic()
        decision, text, _ = await ask(client, 0)
        assert (decision, text.startswith(FALLBACK)) == ("shed_queue_timeout", True)
        decision, text, _ = await ask(client, 300)
        waited = time.monotonic() - started
        assert (decision, text.startswith(FALLBACK)) == ("shed_queue_timeout", True)
        assert waited >= 0.3  # it did wait its 300 ms...
        assert sidecar_gauges(wait_stack)[0] == 1  # ...and the slot was never free


async def test_a_shorter_wait_is_served_in_time_and_ahead_of_later_deadlines(wait_stack):
    served: list[str] = []

    async def one(client: AsyncOpenAI, name: str, wait_ms: int | None) -> dict:
        decision, text, headers = await ask(client, wait_ms)
        assert decision is None and not text.startswith(FALLBACK), (name, decision)
        served.append(name)
        return headers

    async with client_of(wait_stack) as client:
        async with aiohttp.ClientSession() as session, the_one_slot_held(session, wait_stack):
            # The tier allows P1 5 s; the hurried client asks for 3 s, sent after the other:
            # its wait ends first, so it goes first.
            plain = asyncio.create_task(one(client, "plain", None))
            await wait_until(lambda: sidecar_gauges(wait_stack)[1] == 1, what="plain waiting")
            hurried = asyncio.create_task(one(client, "hurried", 3_000))
            await wait_until(lambda: sidecar_gauges(wait_stack)[1] == 2, what="both waiting")
        seen = await hurried
        await plain
    assert served == ["hurried", "plain"]
    assert int(seen["x-mock-saw-x-qos-queue-wait-ms"]) > 0
    assert not any(name.startswith("x-mock-saw-x-qos-max-wait") for name in seen)


async def test_a_wait_foreseen_to_outlast_the_clients_limit_is_answered_at_once(wait_stack):
    async with client_of(wait_stack) as client:
        for _ in range(5):  # the pool's rate of releases becomes known
            decision, _, _ = await ask(client, None)
            assert decision is None
        async with aiohttp.ClientSession() as session, the_one_slot_held(session, wait_stack):
            # One release needed, at the rate seen: foreseen to outlast a 1 ms wait.
            decision, text, _ = await ask(client, 1)
            assert (decision, text.startswith(FALLBACK)) == ("shed_queue_foreseen", True)
            assert sidecar_gauges(wait_stack) == (1, 0)  # it never waited
            waiting = asyncio.create_task(ask(client, None))  # 5 s: foreseen to fit
            await wait_until(lambda: sidecar_gauges(wait_stack)[1] == 1, what="it waits")
        decision, text, _ = await waiting
        assert decision is None and not text.startswith(FALLBACK)
