"""OpenAI clients talk to the mock GPUs through real Envoy and the sidecar."""

from __future__ import annotations

import json
import urllib.request

import openai
import pytest

from tests.integration.helpers import admitted_count

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "Is my payment through?"}]


@pytest.fixture
def client(stack) -> openai.OpenAI:
    with openai.OpenAI(
        base_url=f"{stack.envoy_url}/v1", api_key="test", max_retries=0, timeout=30
    ) as client:
        yield client


def test_chat_completion_goes_through_the_sidecar(stack, client):
    before = admitted_count(stack.sidecar_admin_url)
    completion = client.chat.completions.create(model="mock-llm", messages=MESSAGES, max_tokens=12)
    assert completion.object == "chat.completion"
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content.strip()
    assert completion.usage.completion_tokens == 12
    assert admitted_count(stack.sidecar_admin_url, reach=before + 1) == before + 1


def test_streaming_chat_completion_with_usage(stack, client):
    stream = client.chat.completions.create(
        model="mock-llm",
        messages=MESSAGES,
        max_tokens=9,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert len(content) == 9
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 9


def test_completions_whole_and_streamed(client):
    whole = client.completions.create(model="mock-llm", prompt="Order status:", max_tokens=5)
    assert whole.object == "text_completion"
    assert whole.usage.completion_tokens == 5
    pieces = list(
        client.completions.create(model="mock-llm", prompt="Hi", max_tokens=4, stream=True)
    )
    assert [p.choices[0].finish_reason for p in pieces] == [None, None, None, "length"]


def test_models_without_a_body_are_decided_at_the_headers(stack, client):
    before = admitted_count(stack.sidecar_admin_url)
    assert [m.id for m in client.models.list()] == ["mock-llm"]
    assert admitted_count(stack.sidecar_admin_url, reach=before + 1) == before + 1


def test_raw_sse_ends_with_done(stack):
    request = urllib.request.Request(
        f"{stack.envoy_url}/v1/chat/completions",
        data=json.dumps({"messages": MESSAGES, "max_tokens": 3, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        events = [line for line in response.read().decode().split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)


def test_both_replicas_serve(stack, client):
    """Envoy spreads requests over the mock replicas named in the adapted config."""
    for _ in range(6):
        client.chat.completions.create(model="mock-llm", messages=MESSAGES, max_tokens=2)
    served = []
    for url in stack.engine_urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
            text = response.read().decode()
        line = next(x for x in text.splitlines() if x.startswith("vllm:generation_tokens_total"))
        served.append(float(line.rsplit(" ", 1)[1]))
    assert all(tokens > 0 for tokens in served), served


def test_envoy_counts_admitted_requests_per_tier(stack, client):
    def vcluster_requests() -> dict[str, int]:
        with urllib.request.urlopen(
            f"{stack.envoy_admin_url}/stats?filter=vcluster", timeout=5
        ) as r:
            lines = r.read().decode().splitlines()
        counts = {}
        for line in lines:
            name, _, value = line.partition(": ")
            if name.startswith("vhost.llm.vcluster.") and name.endswith(".upstream_rq_total"):
                counts[name.split(".")[3]] = int(value)
        return counts

    before = vcluster_requests()
    for _ in range(3):
        client.chat.completions.create(model="mock-llm", messages=MESSAGES, max_tokens=2)
    after = vcluster_requests()
    assert set(after) >= {"p0", "p1", "p2"}
    assert after["p2"] == before.get("p2", 0) + 3  # anonymous requests are P2
    assert after["p0"] == before.get("p0", 0)
