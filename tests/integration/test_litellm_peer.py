"""LiteLLM's proxy as the benches set it up, really running in front of a mock vLLM: each
key's tier reaches LiteLLM's scheduler as its priority, a key's own limit refuses with
a 429 in Redis, an unknown key is refused, and answers stream through."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from sidecar.ports import free_port
from sidecar.tooling.benchmarks import litellm_peer
from sidecar.tooling.benchmarks.litellm_peer import KeyLimits, PeerSetup

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _chat(url: str, key: str) -> tuple[int, dict[str, str], bytes]:
    body = {
        "model": "mock-llm",
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 8,
        "stream": True,
    }
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture
def proxy(tmp_path, mock_vllm, redis_url):
    engine = mock_vllm()
    redis = urllib.parse.urlsplit(redis_url)
    keys = (
        KeyLimits("key-p0", "payments", "p0", 600_000, 6_000),
        KeyLimits("key-p2", "batch", "p2", 600_000, 2),  # two requests a minute
    )
    setup = PeerSetup(
        "mock-llm", (engine,), 1_000_000, 10_000, keys,
        redis.hostname or "127.0.0.1", redis.port or 6379, 30.0,
    )  # fmt: skip
    port = free_port()
    process = litellm_peer.start(setup.write(tmp_path / "litellm"), port, tmp_path / "ll.log")
    yield f"http://127.0.0.1:{port}", redis_url
    process.stop()


def test_litellm_serves_each_key_at_its_tier_priority_and_limits_it_in_redis(proxy):
    import redis as redis_client

    url, redis_url = proxy
    status, _, body = _chat(url, "key-p0")
    assert status == 200, body
    assert b"data: [DONE]" in body
    answers = [_chat(url, "key-p2") for _ in range(3)]
    assert [status for status, _, _ in answers] == [200, 200, 429]
    # LiteLLM's scheduler queued it at the key's priority (P0's 0 skips the queue).
    assert answers[0][1].get("x-litellm-request-prioritization-used") == "True"
    assert b"Rate limit exceeded" in answers[2][2]
    # Its limiters keep their counts in the shared Redis, where other proxies see them.
    keys = redis_client.Redis.from_url(redis_url).keys("*")
    assert any(b"key-p2" in key or b"api_key" in key for key in keys), keys
    status, _, _ = _chat(url, "nobody")
    assert status >= 400
