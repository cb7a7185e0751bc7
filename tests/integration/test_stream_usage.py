"""Every settled stream's output comes from the engine's own count, however many tokens a
chunk carries (`stream_interval`) and whatever usage its client asked for: the sidecar asks
the engine for a running count and the closing usage chunk, and Envoy takes back out what
the client did not ask for, so its stream is, byte for byte but for the engine's ids,
times and words, the one it would get without the gateway asking."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.integration.helpers import normalised, scrape, settled, stack_with_tenants, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

KEY = "sk-stream-usage"
TOKENS = 2_000


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with stack_with_tenants(
        tmp_path_factory.mktemp("stream-usage"), {"streams": ("p1", KEY)}, time_scale=0.002
    ) as stack:
        stack.config.set({"tiers": {"p1": {"output_weight": 1.0}}})
        yield stack


def body(interval: int, options: dict | None, n: int = 1) -> dict:
    made = {
        "model": "mock-llm",
        "messages": [{"role": "user", "content": "tell me"}],
        "max_tokens": TOKENS // n,
        "ignore_eos": True,
        "stream": True,
        "stream_interval": interval,
    }
    if options is not None:
        made["stream_options"] = options
    if n > 1:
        made["n"] = n
    return made


async def streamed(url: str, sent: dict, key: str | None = KEY) -> bytes:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/chat/completions", json=sent, headers=headers) as response,
    ):
        assert response.status == 200
        assert "x-qos-decision" not in response.headers
        return await response.read()


CLIENT_ASKS = {
    "no usage": None,
    "closing usage": {"include_usage": True},
    "running usage": {"include_usage": True, "continuous_usage_stats": True},
    "running without closing": {"continuous_usage_stats": True},
}


@pytest.mark.parametrize("interval", [1, 8, 64, 512])
@pytest.mark.parametrize("asked", list(CLIENT_ASKS))
@pytest.mark.timeout(120)
async def test_settled_from_the_engines_count_and_the_stream_as_asked(stack, interval, asked):
    await wait_until(lambda: _in_flight(stack) == 0, what="earlier exchanges ended")
    before, guessed = settled(stack, "usage"), settled(stack, "estimate")
    sent = body(interval, CLIENT_ASKS[asked])
    through = await streamed(stack.envoy_url, sent)
    await wait_until(lambda: settled(stack, "usage") > before, what="settled")
    assert settled(stack, "usage") - before == TOKENS  # the engine's count, every token
    assert settled(stack, "estimate") == guessed
    # What the engine sends for the client's own request, straight from it.
    direct = await streamed(stack.engine_urls[0], sent, key=None)
    assert normalised(through) == normalised(direct)
    events = [line for line in through.split(b"\n\n") if line.startswith(b"data: {")]
    per_chunk = max(interval, 1)
    assert len(events) >= TOKENS // per_chunk  # the interval held: a chunk per interval


@pytest.mark.timeout(120)
async def test_several_choices_are_settled_together_and_streamed_as_asked(stack):
    await wait_until(lambda: _in_flight(stack) == 0, what="earlier exchanges ended")
    before = settled(stack, "usage")
    sent = body(8, None, n=4)
    through = await streamed(stack.envoy_url, sent)
    await wait_until(lambda: settled(stack, "usage") > before, what="settled")
    assert settled(stack, "usage") - before == TOKENS
    direct = await streamed(stack.engine_urls[0], sent, key=None)
    assert normalised(through) == normalised(direct)
    closing = [e for e in through.split(b"\n\n") if b'"usage":' in e]
    assert closing == []  # the client asked for none


def _in_flight(stack) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return sum(v for k, v in samples.items() if k.startswith("qos_requests_in_flight{"))


async def test_the_normalised_form_keeps_all_but_ids_times_and_words():
    chunk = {"id": "chatcmpl-1", "created": 5, "choices": [{"delta": {"content": 'a "b'}}]}
    other = {"id": "chatcmpl-2", "created": 6, "choices": [{"delta": {"content": "c"}}]}
    one, two = (
        b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n" for c in (chunk, other)
    )
    assert normalised(one) == normalised(two)
    assert normalised(one) != normalised(one.replace(b"}]}", b'}],"usage":null}'))
