"""What a request really costs, through real Envoy: output tokens reserved at admission
and settled from the answer's usage when the exchange ends, so a tenant's --rate holds
for short prompts with long answers; a shorter answer gives back what it did not use."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from sidecar.request.completion.exchange_ends import UNLOGGED_GRACE_SECONDS
from tests.integration.helpers import (
    chat_exchange,
    flood,
    p1_in_flight,
    scrape,
    settled,
    settlement_counts,
    stack_with_tenants,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY = "settle-p1"
ONCE_KEY = "settle-once-p1"  # a tenant of its own: the floods above leave KEY's bucket dry
P0_KEY = "settle-p0"  # a P0 tenant: P0's output_weight stays 0
P0_RATE = 1_000
RATE = 4_000  # the tenant's tokens a second, input + output
BURST_SECONDS = 1.0  # its bucket holds a second of its rate: one 2 020-token request fits


@pytest.fixture(scope="module")
def settle_stack(tmp_path_factory):
    """Fast mock GPUs (a 2 000-token answer in half a second), a P1 tenant with a rate."""
    with stack_with_tenants(tmp_path_factory.mktemp("settle-stack"), {}, time_scale=0.01) as stack:
        stack.config.tenant(
            "settle", "p1", KEY, rate_tokens_per_second=RATE, burst_seconds=BURST_SECONDS
        )
        stack.config.tenant(
            "settle-once", "p1", ONCE_KEY, rate_tokens_per_second=RATE, burst_seconds=5
        )
        stack.config.tenant(
            "settle-p0", "p0", P0_KEY, rate_tokens_per_second=P0_RATE, burst_seconds=1
        )
        stack.config.set({"tiers": {"p1": {"output_weight": 1.0}}})
        yield stack


def chat(max_tokens: int, ignore_eos: bool) -> dict:
    content = "x" * 4 * 16  # 16 tokens of text, 20 with the message's template
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "ignore_eos": ignore_eos,
    }


async def test_short_prompts_with_long_answers_are_held_to_the_tenant_s_rate(settle_stack):
    seconds = 20
    usages = await flood(settle_stack.envoy_url, seconds, chat(2_000, ignore_eos=True), KEY)
    served = sum(u["prompt_tokens"] + u["completion_tokens"] for u in usages)
    assert all(u["completion_tokens"] == 2_000 for u in usages)
    # Its rate over the run, and the bucket's burst at the start.
    expected = RATE * (seconds + BURST_SECONDS)
    assert abs(served - expected) / expected < 0.10, (served, expected, len(usages))
    exact = settled(settle_stack, "usage")
    assert exact >= 2_000 * (len(usages) - 8)  # exact, from the answers' usage


async def test_a_p0_tenant_is_still_charged_its_prompts_only(settle_stack):
    # The same traffic from a P0 tenant with a rate: its answers (512 tokens, P0's cap)
    # cost it nothing, so it is served far above what its prompts and answers together
    # would be held to.
    seconds = 5
    usages = await flood(settle_stack.envoy_url, seconds, chat(2_000, True), key=P0_KEY)
    prompts = sum(u["prompt_tokens"] for u in usages)
    served = prompts + sum(u["completion_tokens"] for u in usages)
    assert prompts <= P0_RATE * (seconds + 1)  # its rate holds its prompts
    assert served > 3 * P0_RATE * (seconds + 1), (served, len(usages))
    samples = scrape(f"{settle_stack.sidecar_admin_url}/metrics")
    assert samples.get('qos_output_reserved_tokens_total{tier="p0"}', 0.0) == 0.0


async def test_a_shorter_answer_gives_back_what_it_reserved_and_did_not_use(settle_stack):
    # max_tokens 2 000 reserved, answers of 32 to 256 tokens: without the refund the
    # tenant would get an eighth of its rate.
    seconds = 10
    usages = await flood(settle_stack.envoy_url, seconds, chat(2_000, ignore_eos=False), KEY)
    served = sum(u["prompt_tokens"] + u["completion_tokens"] for u in usages)
    assert max(u["completion_tokens"] for u in usages) <= 256
    assert served > 0.5 * RATE * seconds, (served, len(usages))


async def stream_usage(url: str, include_usage: bool, n: int = 1) -> dict | None:
    body = {
        **chat(300 // n, ignore_eos=True),
        "stream": True,
        **({"stream_options": {"include_usage": True}} if include_usage else {}),
        **({"n": n} if n > 1 else {}),
    }
    usage = None
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
        ) as response,
    ):
        assert response.status == 200
        async for line in response.content:
            if line.startswith(b"data: {") and b'"usage":{' in line:
                usage = json.loads(line[6:])["usage"]
    return usage


async def test_a_stream_is_settled_from_the_engines_usage_whether_its_client_asked_or_not(
    settle_stack,
):
    url = settle_stack.envoy_url
    # The tests before end with floods whose last access-log entries may still be on
    # their way: counted from before one of them lands, the sum would be off by its usage.
    await wait_until(lambda: p1_in_flight(settle_stack) == 0, what="earlier exchanges ended")
    exact, estimated = settled(settle_stack, "usage"), settled(settle_stack, "estimate")
    usage = await stream_usage(url, include_usage=True)
    assert usage is not None and usage["completion_tokens"] == 300
    await wait_until(lambda: settled(settle_stack, "usage") == exact + 300, what="exact")
    assert settled(settle_stack, "estimate") == estimated
    # That stream also measured the estimate it did not need: within 5 % of the truth.
    samples = scrape(f"{settle_stack.sidecar_admin_url}/metrics")
    measured = samples["qos_output_estimate_error_ratio_count{}"]
    within = (
        samples['qos_output_estimate_error_ratio_bucket{le="0.05"}']
        - samples['qos_output_estimate_error_ratio_bucket{le="-0.05"}']
    )
    assert measured >= 1 and within == measured
    # A client that asked for no usage gets none, and is settled from it all the same.
    assert await stream_usage(url, include_usage=False) is None
    await wait_until(lambda: settled(settle_stack, "usage") == exact + 600, what="exact again")
    assert settled(settle_stack, "estimate") == estimated


async def test_each_exchange_is_settled_once_even_when_its_stream_is_aborted(settle_stack):
    url = settle_stack.envoy_url
    await wait_until(lambda: p1_in_flight(settle_stack) == 0, what="earlier exchanges ended")
    reserved, exact, estimated = settlement_counts(settle_stack)
    whole = chat(300, ignore_eos=True)
    streamed = {**whole, "stream": True, "stream_options": {"include_usage": True}}
    # Every one of them is seen twice: by its access-log entry and by the end of its
    # ext_proc stream (the aborted one: its client left, then Envoy logged it).
    await chat_exchange(url, ONCE_KEY, whole)
    await chat_exchange(url, ONCE_KEY, streamed)
    await chat_exchange(url, ONCE_KEY, {**whole, "stream": True}, leave_after=20)
    # The two answers' usage, once each, and the aborted stream's running count when
    # its client left (the engine's own, asked for on every stream).
    await wait_until(
        lambda: (
            settlement_counts(settle_stack)[0] == reserved + 3 * 300
            and settlement_counts(settle_stack)[1] > exact + 2 * 300
        ),
        what="three exchanges settled",
    )
    now_reserved, now_exact, now_estimated = settlement_counts(settle_stack)
    assert now_exact < exact + 3 * 300
    assert now_estimated == estimated
    # Past the moment a stream's end gives back a slot its access log did not: nothing
    # is settled a second time.
    deadline = time.monotonic() + 1.5 * UNLOGGED_GRACE_SECONDS
    while time.monotonic() < deadline:
        assert settlement_counts(settle_stack) == (now_reserved, now_exact, now_estimated)
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("how", ["whole", "stream with usage", "stream without usage"])
async def test_every_choice_of_an_answer_with_several_is_settled(settle_stack, how):
    url = settle_stack.envoy_url
    await wait_until(lambda: p1_in_flight(settle_stack) == 0, what="earlier exchanges ended")
    source = "usage"  # asked of the engine whether the client asked or not
    before = settled(settle_stack, source)
    if how == "whole":
        body = {**chat(100, ignore_eos=True), "n": 3}
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
            ) as response,
        ):
            answer = await response.json()
        assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
        assert answer["usage"]["completion_tokens"] == 300
    else:
        usage = await stream_usage(url, include_usage=how == "stream with usage", n=3)
        assert usage is None if how == "stream without usage" else usage["completion_tokens"] == 300
    await wait_until(lambda: settled(settle_stack, source) > before, what="settled")
    counted = settled(settle_stack, source) - before
    assert counted == 300  # all three choices, not one
