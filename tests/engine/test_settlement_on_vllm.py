"""Output settled from the real engine's answers: whole and streamed answers settle from
vLLM's usage, which the gateway asks of every stream whatever its client asked (and takes
back out of the client's stream), however many tokens a chunk carries; a stream its
client leaves is aborted by vLLM (its KV freed, its metrics say so), settled from vLLM's
running count, and gives its slot back."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.engine.engine_client import until
from tests.engine.stacks import LOAD_SOURCES, stack_in_front
from tests.integration.helpers import (
    chat_exchange,
    normalised,
    p1_in_flight,
    settled,
    settlement_counts,
)

pytestmark = [pytest.mark.engine, pytest.mark.integration, pytest.mark.asyncio]

KEY = "vllm-settle-p1"
ANSWER_TOKENS = 120  # the tiny model never ends early: every answer is this long


@pytest.fixture(params=LOAD_SOURCES)
def settle_stack(request, idle_engine, tmp_path):
    config = {"tiers": {"p1": {"output_weight": 1.0}}}
    tenants = {"settle": ("p1", KEY)}
    with stack_in_front(idle_engine, tmp_path, request.param, tenants, config) as stack:
        yield stack


def body(engine, stream: bool, include_usage: bool = False) -> dict:
    chat = {
        "model": engine.settings.served_model,
        "messages": engine.prompt_of(40),
        "max_tokens": ANSWER_TOKENS,
        "stream": stream,
    }
    if include_usage:
        chat["stream_options"] = {"include_usage": True}
    return chat


@pytest.mark.timeout(600)
async def test_whole_and_streamed_answers_settle_from_vllm_s_usage(settle_stack, idle_engine):
    reserved, exact, estimated = settlement_counts(settle_stack)
    whole = await chat_exchange(settle_stack.envoy_url, KEY, body(idle_engine, stream=False))
    streamed = await chat_exchange(
        settle_stack.envoy_url, KEY, body(idle_engine, stream=True, include_usage=True)
    )
    for usage in (whole, streamed):
        assert usage is not None and usage["completion_tokens"] == ANSWER_TOKENS, usage
    await until(
        lambda: settlement_counts(settle_stack)[1] == exact + 2 * ANSWER_TOKENS, 30, "settled"
    )
    assert settlement_counts(settle_stack) == (
        reserved + 2 * ANSWER_TOKENS,
        exact + 2 * ANSWER_TOKENS,
        estimated,
    )

    # Without include_usage, and with several tokens a chunk: settled from vLLM's count
    # all the same, and the client's stream as vLLM sends it for the client's request.
    for interval in (1, 7):
        sent = {**body(idle_engine, stream=True), "stream_interval": interval}
        before = settlement_counts(settle_stack)[1]
        through = await raw_stream(settle_stack.envoy_url, sent, KEY)
        await until(
            lambda b=before: settlement_counts(settle_stack)[1] == b + ANSWER_TOKENS, 30, "exact"
        )
        direct = await raw_stream(idle_engine.url, sent, None)
        assert shape(through) == shape(direct), (interval, through[-600:], direct[-600:])
    assert settlement_counts(settle_stack)[2] == estimated


def shape(stream: bytes) -> list:
    """The stream, event for event (ids, times and words blanked), with runs of alike
    chunks taken as one: how vLLM groups tokens by stream_interval depends on when its
    output processor catches up with the engine, so two streams of one request may split
    their tokens differently; what each kind of chunk carries, in order, may not."""
    kinds: list = []
    for event in normalised(stream).split(b"\n\n"):
        if event and (not kinds or kinds[-1] != event):
            kinds.append(event)
    return kinds


async def raw_stream(url: str, sent: dict, key: str | None) -> bytes:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/chat/completions", json=sent, headers=headers) as response,
    ):
        assert response.status == 200
        return await response.read()


@pytest.mark.timeout(600)
async def test_every_choice_of_an_n_answer_is_settled(settle_stack, idle_engine):
    answers = 3
    reserved, exact, estimated = settlement_counts(settle_stack)
    for stream in (False, True):
        asked = {**body(idle_engine, stream=stream, include_usage=stream), "n": answers}
        usage = await chat_exchange(settle_stack.envoy_url, KEY, asked)
        assert usage is not None and usage["completion_tokens"] == answers * ANSWER_TOKENS
    settled = 2 * answers * ANSWER_TOKENS
    await until(lambda: settlement_counts(settle_stack)[1] == exact + settled, 30, "settled")
    assert settlement_counts(settle_stack) == (reserved + settled, exact + settled, estimated)

    # Streamed without its usage: settled from vLLM's closing usage all the same.
    asked = {**body(idle_engine, stream=True), "n": answers}
    assert await chat_exchange(settle_stack.envoy_url, KEY, asked) is None
    total = settled + answers * ANSWER_TOKENS
    await until(lambda: settlement_counts(settle_stack)[1] == exact + total, 30, "settled")
    assert settlement_counts(settle_stack)[2] == estimated


@pytest.mark.timeout(600)
async def test_a_stream_its_client_leaves_frees_the_engine_and_its_slot(settle_stack, idle_engine):
    engine = idle_engine
    generated = engine.metric("vllm:generation_tokens_total")
    reserved, exact, estimated = settlement_counts(settle_stack)
    long_answer = {**body(engine, stream=True), "max_tokens": engine.settings.max_model_len - 100}
    assert await chat_exchange(settle_stack.envoy_url, KEY, long_answer, leave_after=5) is None
    await until(engine.idle, 60, "aborted")
    await until(lambda: p1_in_flight(settle_stack) == 0, 30, "the slot given back")
    await until(lambda: settlement_counts(settle_stack)[1] > exact, 30, "settled")
    now_reserved, now_exact, now_estimated = settlement_counts(settle_stack)
    assert now_reserved == reserved + long_answer["max_tokens"]
    assert now_estimated == estimated
    made = engine.metric("vllm:generation_tokens_total") - generated
    # vLLM's running count when the client left, what it had sent by then.
    assert 0 < now_exact - exact <= made
    assert made < long_answer["max_tokens"]  # vLLM stopped when the client left


@pytest.mark.timeout(600)
async def test_a_whole_answer_its_client_leaves_stops_vllm_and_is_charged_in_full(
    settle_stack, idle_engine
):
    engine = idle_engine
    generated = engine.metric("vllm:generation_tokens_total")
    abandoned = settled(settle_stack, "abandoned")
    long_answer = {**body(engine, stream=False), "max_tokens": engine.settings.max_model_len - 100}
    asked = long_answer["max_tokens"]

    async def ask() -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{settle_stack.envoy_url}/v1/chat/completions",
                json=long_answer,
                headers={"Authorization": f"Bearer {KEY}"},
            ) as answer,
        ):
            await answer.read()

    asking = asyncio.ensure_future(ask())
    made = lambda: engine.metric("vllm:generation_tokens_total") - generated  # noqa: E731
    await until(lambda: made() >= asked / 5, 120, "a fifth made")
    asking.cancel()  # the client leaves: its connection closes
    left_at = time.monotonic()
    await until(lambda: engine.requests() == (0, 0), 30, "vLLM stopped")
    assert time.monotonic() - left_at < 1.0
    assert made() < asked
    await until(lambda: settled(settle_stack, "abandoned") > abandoned, 30, "settled")
    # Charged all it asked for: never less than vLLM made before the disconnect reached it.
    assert settled(settle_stack, "abandoned") - abandoned == asked >= made()
