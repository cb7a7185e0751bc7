"""Admission through real Envoy and Redis, as OpenAI clients see it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from sidecar.request.answers.openai import FINISH_REASON
from tests.integration.helpers import decision_count

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "hi"}]  # about 5 budget tokens
P2_KEY, P0_KEY = "test-key-bulk", "test-key-pay"


@pytest.fixture
def config(stack):
    """The stack's configuration, with two tenants; defaults restored afterwards."""
    config = stack.config
    config.tenant("bulk", "p2", P2_KEY)
    config.tenant("pay", "p0", P0_KEY)
    yield config
    config.set({})


def client(stack, key: str | None = P2_KEY) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{stack.envoy_url}/v1", api_key=key or "none", max_retries=0, timeout=30
    )


@pytest.fixture
def p2_exhausted(stack, config):
    """P2's budget at 0.1 tokens/s with room for two requests, then emptied."""
    config.set(
        {
            "fleet": {"capacity_tokens_per_second": 1000},
            "tiers": {"p2": {"share": 0.0001, "burst_seconds": 100}},
            "controller": {"floors": {"p2": 0.0001}},
        }
    )
    with client(stack) as bulk:
        for _ in range(10):
            answer = bulk.chat.completions.with_raw_response.create(
                model="mock-llm", messages=MESSAGES, max_tokens=2
            )
            if answer.headers.get("x-qos-decision") == "shed_tier_budget":
                return config
    raise AssertionError("P2's budget never ran out")


def test_shed_chat_completion_parses_in_the_openai_client(stack, p2_exhausted):
    with client(stack) as bulk:
        raw = bulk.chat.completions.with_raw_response.create(model="mock-llm", messages=MESSAGES)
        completion = raw.parse()
    assert raw.headers["x-qos-decision"] == "shed_tier_budget"
    # Back when the tier's bucket has refilled, within the tier's 15 s; the text says so.
    seconds = int(raw.headers["retry-after"])
    assert 0 < int(raw.headers["retry-after-ms"]) <= seconds * 1000 <= 15_000
    assert completion.object == "chat.completion"
    assert completion.choices[0].finish_reason == FINISH_REASON
    assert f"retry in {seconds} s" in completion.choices[0].message.content


def test_shed_streaming_chat_parses_in_the_openai_client(stack, p2_exhausted):
    with client(stack) as bulk:
        chunks = list(
            bulk.chat.completions.create(
                model="mock-llm",
                messages=MESSAGES,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    assert len(chunks) == 1
    assert chunks[0].choices[0].finish_reason == FINISH_REASON
    assert "retry in" in chunks[0].choices[0].delta.content
    assert chunks[0].usage.total_tokens == 0


def test_shed_completions_parse_whole_and_streamed(stack, p2_exhausted):
    with client(stack) as bulk:
        whole = bulk.completions.create(model="mock-llm", prompt="hi")
        streamed = list(bulk.completions.create(model="mock-llm", prompt="hi", stream=True))
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason == FINISH_REASON
    assert [c.choices[0].finish_reason for c in streamed] == [FINISH_REASON]


def test_tiers_that_prefer_errors_get_a_rate_limit_error(stack, p2_exhausted):
    p2_exhausted.set(
        {
            "fleet": {"capacity_tokens_per_second": 1000},
            "tiers": {"p2": {"share": 0.0001, "burst_seconds": 100, "fallback": "error"}},
            "controller": {"floors": {"p2": 0.0001}},
        }
    )
    with client(stack) as bulk, pytest.raises(openai.RateLimitError) as refused:
        bulk.chat.completions.create(model="mock-llm", messages=MESSAGES)
    assert refused.value.code == "load_shedding"
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 15
    assert refused.value.response.headers["x-qos-decision"] == "shed_tier_budget"


def test_p0_is_served_while_p2_is_shed(stack, p2_exhausted):
    with client(stack, P0_KEY) as pay:
        raw = pay.chat.completions.with_raw_response.create(
            model="mock-llm", messages=MESSAGES, max_tokens=3
        )
    assert raw.headers["x-mock-saw-x-qos-tier"] == "p0"
    assert raw.parse().choices[0].finish_reason == "length"


def test_a_p2_key_claiming_p0_is_served_as_p2(stack, config):
    spoof = {"x-qos-tier": "p0", "x-qos-tenant": "pay", "x-qos-anything": "1"}
    with client(stack) as bulk:
        raw = bulk.chat.completions.with_raw_response.create(
            model="mock-llm", messages=MESSAGES, max_tokens=3, extra_headers=spoof
        )
    assert raw.headers["x-mock-saw-x-qos-tier"] == "p2"
    assert raw.headers["x-mock-saw-x-qos-tenant"] == "bulk"
    assert "x-mock-saw-x-qos-anything" not in raw.headers


def test_p0_max_tokens_is_capped_in_the_body_envoy_forwards(stack, config):
    with client(stack, P0_KEY) as pay:
        completion = pay.chat.completions.create(
            model="mock-llm", messages=MESSAGES, max_tokens=4000, extra_body={"ignore_eos": True}
        )
    assert completion.usage.completion_tokens == 512


def test_long_p0_prompt_is_refused_with_an_openai_error(stack, config):
    with client(stack, P0_KEY) as pay, pytest.raises(openai.BadRequestError) as refused:
        pay.chat.completions.create(
            model="mock-llm", messages=[{"role": "user", "content": "x" * 20_000}]
        )
    assert refused.value.code == "prompt_too_long"
    assert "4096" in refused.value.message


def test_unknown_keys_are_refused_when_configured(stack, config):
    config.set({"identity": {"unknown": "reject"}})
    with client(stack, "made-up") as stranger, pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    with client(stack, P2_KEY) as bulk:
        assert [m.id for m in bulk.models.list()] == ["mock-llm"]


def post_raw(stack, path: str, data: bytes, content_type="application/json"):
    request = urllib.request.Request(
        f"{stack.envoy_url}{path}", data=data, headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe\x00garbage", "not valid UTF-8"),
        (b'{"messages": []}', "non-empty array"),
        (b'{"messages": [{"role": "user", "content": 7}]}', "content"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "lots"}', "max_tokens"),
        (b"[]", "JSON object"),
        (b"", "not valid JSON"),
    ],
)
def test_bad_bodies_get_openai_400s_and_the_sidecar_stays_up(stack, data, says):
    before = decision_count(stack.sidecar_admin_url, "respond", "invalid_request")
    status, headers, body = post_raw(stack, "/v1/chat/completions", data)
    assert status == 400
    assert headers["x-qos-decision"] == "invalid_request"
    error = json.loads(body)["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"
    counted = decision_count(stack.sidecar_admin_url, "respond", "invalid_request", before + 1)
    assert counted == before + 1


def test_an_oversized_body_gets_envoys_413_as_an_openai_error(stack):
    huge = json.dumps({"messages": [{"role": "user", "content": "x" * 5_000_000}]}).encode()
    status, headers, body = post_raw(stack, "/v1/chat/completions", huge)
    assert status == 413
    assert headers["content-type"] == "application/json"
    assert json.loads(body)["error"]["code"] == "request_too_large"


def test_the_largest_body_envoy_accepts_is_still_decided_by_the_sidecar(stack):
    """At Envoy's buffer limit the ext_proc message is a little larger than the body; the
    sidecar must still take it, not fail the stream (Envoy would then fail open)."""
    envelope = json.dumps({"messages": [{"role": "user", "content": ""}]}).encode()
    limit = 4 * 1024 * 1024  # per_connection_buffer_limit_bytes in envoy.yaml
    content = "x" * (limit - len(envelope))
    largest = json.dumps({"messages": [{"role": "user", "content": content}]}).encode()
    assert len(largest) == limit
    status, headers, body = post_raw(stack, "/v1/chat/completions", largest)
    assert headers.get("x-qos-decision"), (status, body[:200])  # the sidecar's answer


def test_unknown_paths_pass_through_to_vllm(stack):
    status, _, _ = post_raw(stack, "/v1/no-such-thing", b"{}")
    assert status == 404  # the model server's answer, not the sidecar's
