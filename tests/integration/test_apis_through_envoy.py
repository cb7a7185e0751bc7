"""The official clients through real Envoy and the sidecar: the OpenAI Responses API and
Anthropic Messages, plain and streamed. Successful answers pass untouched; shed and
refused ones parse as the client's own types; each is settled from its API's usage."""

from __future__ import annotations

import time

import anthropic
import openai
import pytest

from sidecar.config.schema import TierConfig
from tests.integration.helpers import scrape, stack_with_tenants

pytestmark = pytest.mark.integration

KEYS = {"p0": "apis-p0", "p1": "apis-p1", "p2": "apis-p2"}
FALLBACK = TierConfig(share=0.05).message()
MESSAGES = [{"role": "user", "content": "Where is my parcel?"}]


@pytest.fixture(scope="module")
def api_stack(tmp_path_factory):
    tenants = {f"apis-{tier}": (tier, key) for tier, key in KEYS.items()}
    with stack_with_tenants(tmp_path_factory.mktemp("apis"), tenants, replicas=1) as stack:
        yield stack


@pytest.fixture
def config(api_stack):
    yield api_stack.config
    api_stack.config.mode("normal")
    api_stack.config.set({})


def openai_client(stack, tier: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.envoy_url}/v1", api_key=KEYS[tier], max_retries=0)


def anthropic_client(stack, tier: str) -> anthropic.Anthropic:
    # api_key: sent as x-api-key, as Anthropic's clients do.
    return anthropic.Anthropic(base_url=stack.envoy_url, api_key=KEYS[tier], max_retries=0)


def test_responses_served_pass_untouched(api_stack):
    client = openai_client(api_stack, "p0")
    answer = client.responses.create(model="mock-llm", input="hi", max_output_tokens=20)
    assert answer.id.startswith("resp_") and "qos" not in answer.id
    assert answer.output_text and answer.usage.input_tokens > 0
    events = list(client.responses.create(model="mock-llm", input="hi", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text and deltas


def test_responses_shed_as_an_incomplete_response(api_stack, config):
    config.mode("core-only")
    client = openai_client(api_stack, "p2")
    raw = client.responses.with_raw_response.create(model="mock-llm", input="hi")
    assert raw.headers["x-qos-decision"] == "shed_core_only" and raw.headers["retry-after"]
    answer = raw.parse()
    assert answer.status == "incomplete" and answer.output_text == FALLBACK
    assert answer.incomplete_details.reason == "load_shedding"
    events = list(client.responses.create(model="mock-llm", input="hi", stream=True))
    assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.incomplete"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == FALLBACK


def test_responses_errors_are_the_clients_own(api_stack, config):
    config.set({"tiers": {"p2": {"fallback": "error"}}})
    config.mode("core-only")
    client = openai_client(api_stack, "p2")
    with pytest.raises(openai.RateLimitError) as shed:
        client.responses.create(model="mock-llm", input="hi")
    assert shed.value.body["code"] == "load_shedding"
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="mock-llm", input="hi", stream=True)
    with pytest.raises(openai.BadRequestError) as bad:
        openai_client(api_stack, "p0").responses.create(model="mock-llm", input=[{"x": 1}])
    assert bad.value.response.headers["x-qos-decision"] == "invalid_request"


def test_messages_served_pass_untouched(api_stack):
    client = anthropic_client(api_stack, "p0")
    answer = client.messages.create(model="mock-llm", max_tokens=20, messages=MESSAGES)
    assert answer.id.startswith("chatcmpl-") and "qos" not in answer.id  # vLLM's own id
    assert answer.content[0].text and answer.usage.output_tokens > 0
    with client.messages.stream(model="mock-llm", max_tokens=20, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text and final.usage.output_tokens > 0


def test_messages_shed_as_a_message_or_anthropics_errors(api_stack, config):
    config.mode("core-only")
    client = anthropic_client(api_stack, "p2")
    raw = client.messages.with_raw_response.create(
        model="mock-llm", max_tokens=20, messages=MESSAGES
    )
    assert raw.headers["x-qos-decision"] == "shed_core_only"
    assert raw.parse().content[0].text == FALLBACK
    with client.messages.stream(model="mock-llm", max_tokens=20, messages=MESSAGES) as stream:
        assert "".join(stream.text_stream) == FALLBACK
    config.set({"tiers": {"p2": {"fallback": "error"}}})
    with pytest.raises(anthropic.OverloadedError) as shed:
        client.messages.create(model="mock-llm", max_tokens=20, messages=MESSAGES)
    assert shed.value.body["error"]["type"] == "overloaded_error"
    streamed = client.messages.stream(model="mock-llm", max_tokens=9, messages=MESSAGES)
    with pytest.raises(anthropic.OverloadedError), streamed as stream:
        list(stream.text_stream)
    with pytest.raises(anthropic.BadRequestError) as bad:
        anthropic_client(api_stack, "p0").messages.create(
            model="mock-llm", max_tokens=0, messages=MESSAGES
        )
    assert bad.value.body["error"]["type"] == "invalid_request_error"
    unknown = anthropic.Anthropic(base_url=api_stack.envoy_url, api_key="nobody", max_retries=0)
    config.set({"identity": {"unknown": "reject"}})
    with pytest.raises(anthropic.AuthenticationError):
        unknown.messages.create(model="mock-llm", max_tokens=9, messages=MESSAGES)


def settled(stack) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return samples.get('qos_output_settled_tokens_total{source="usage",tier="p1"}', 0.0)


def streamed_message_usage(client: anthropic.Anthropic):
    with client.messages.stream(model="mock-llm", max_tokens=30, messages=MESSAGES) as stream:
        return stream.get_final_message().usage


def streamed_response_usage(client: openai.OpenAI):
    events = list(client.responses.create(model="mock-llm", input="hi", stream=True))
    return events[-1].response.usage  # response.completed


def test_each_api_is_settled_from_its_own_usage(api_stack, config):
    config.set({"tiers": {"p1": {"output_weight": 1.0}}})
    gpt, claude = openai_client(api_stack, "p1"), anthropic_client(api_stack, "p1")
    calls = [
        lambda: gpt.responses.create(model="mock-llm", input="hi", max_output_tokens=30).usage,
        lambda: streamed_response_usage(gpt),
        lambda: claude.messages.create(model="mock-llm", max_tokens=30, messages=MESSAGES).usage,
        lambda: streamed_message_usage(claude),
    ]
    for call in calls:
        before = settled(api_stack)
        usage = call()
        deadline = time.monotonic() + 10
        while settled(api_stack) == before:  # the exchange's end comes a moment later
            assert time.monotonic() < deadline, "never settled from its usage"
            time.sleep(0.01)
        assert settled(api_stack) - before == usage.output_tokens
