"""The vLLM stand-in over real HTTP: metrics, the prefill stall, disconnects, errors."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import urllib.error
import urllib.request

import aiohttp
import pytest

from tests.integration.helpers import scrape, wait_until

pytestmark = pytest.mark.integration

VLLM_GAUGES = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
)


def post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def gauge(url: str, name: str) -> float:
    return scrape(f"{url}/metrics")[f'{name}{{model_name="mock-llm"}}']


def test_metrics_parse_with_the_four_vllm_names(mock_vllm):
    url = mock_vllm()
    status, _ = post(f"{url}/v1/completions", {"prompt": "hi", "max_tokens": 3})
    assert status == 200
    samples = scrape(f"{url}/metrics")
    for name in VLLM_GAUGES:
        assert samples[f'{name}{{model_name="mock-llm"}}'] == 0.0
    assert samples['vllm:generation_tokens_total{model_name="mock-llm"}'] == 3.0
    assert samples['vllm:cache_config_info{block_size="16",num_gpu_blocks="8192"}'] == 1.0


async def _stream_token_times(session, url, body) -> list[float]:
    times = []
    async with session.post(f"{url}/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status == 200
        async for line in r.content:
            if line.startswith(b"data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):  # the first chunk only carries the role
                    times.append(time.monotonic())
    return times


@pytest.mark.asyncio
async def test_a_long_prompt_raises_the_tpot_of_concurrent_short_streams(mock_vllm):
    # Real time at a quarter speed: decode steps of ~6 ms, a 32K-token prefill of 0.5 s.
    scale = 0.25
    url = mock_vllm("--time-scale", str(scale))
    short = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 150, "ignore_eos": True}
    long_prompt = {"messages": [{"role": "user", "content": "x" * 4 * 32_768}], "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        streams = [asyncio.create_task(_stream_token_times(session, url, short)) for _ in range(3)]
        await wait_until(lambda: gauge(url, "vllm:num_requests_running") == 3)
        async with session.post(f"{url}/v1/chat/completions", json=long_prompt) as response:
            assert response.status == 200
        results = await asyncio.gather(*streams)
    prefill_seconds = 32_768 / 16_384 * scale
    for times in results:
        assert len(times) == 150
        worst_gap = max(b - a for a, b in itertools.pairwise(times))
        # No scheduling delay can make the stall shorter than the prefill itself.
        assert worst_gap >= prefill_seconds * 0.95


@pytest.mark.asyncio
async def test_a_client_that_disconnects_frees_its_sequence(mock_vllm):
    url = mock_vllm("--time-scale", "1")
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000, "stream": True}
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/v1/chat/completions", json=body) as response,
    ):
        await response.content.readline()
        assert gauge(url, "vllm:num_requests_running") == 1
        assert gauge(url, "vllm:kv_cache_usage_perc") > 0
    await wait_until(lambda: gauge(url, "vllm:num_requests_running") == 0)
    assert gauge(url, "vllm:kv_cache_usage_perc") == 0


def test_bad_requests_get_openai_errors(mock_vllm):
    url = mock_vllm("--max-model-len", "1000")
    cases = [
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "user", "content": "x" * 8000}]}, 400, None),
        # Beyond aiohttp's default 1 MiB body limit: still vLLM's context-length answer.
        ({"messages": [{"role": "user", "content": "x" * 2_000_000}]}, 400, None),
        ({"model": "other", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
        ({"prompt": "x", "priority": 1}, 400, None),
    ]
    for body, status, param in cases:
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        got, answer = post(url + path, body)
        assert got == status, (body, answer)
        assert answer["error"]["code"] == status
        assert answer["error"]["param"] == param
        assert answer["error"]["message"]


@pytest.mark.asyncio
async def test_under_kv_pressure_priority_scheduling_preempts_the_p2_request(mock_vllm):
    # Four KV blocks (64 tokens); two answers of 40 tokens need six between them.
    url = mock_vllm(
        "--scheduling-policy",
        "priority",
        "--kv-cache-tokens",
        "64",
        "--max-model-len",
        "64",
        "--time-scale",
        "0.2",
    )
    finished = []

    async def run(session, priority, started=None):
        body = {
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 40,
            "ignore_eos": True,
            "stream": True,
            "priority": priority,
        }
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            assert response.status == 200
            async for line in response.content:
                if started is not None and not started.is_set() and b'"content":"' in line:
                    started.set()
        finished.append(priority)

    async with aiohttp.ClientSession() as session:
        batch_running = asyncio.Event()
        batch = asyncio.create_task(run(session, 2, batch_running))
        await batch_running.wait()  # the P2 request decodes first...
        await run(session, 0)  # ...then P0 arrives and needs its blocks
        await batch
    assert finished == [0, 2]  # P0 was never set back; P2 was preempted and recomputed
    samples = scrape(f"{url}/metrics")
    assert samples['vllm:num_preemptions_total{model_name="mock-llm"}'] >= 1
