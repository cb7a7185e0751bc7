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

VLLM_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting")
SERIES = '{engine="0",model_name="mock-llm"}'  # vLLM 0.33's labels


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
    return scrape(f"{url}/metrics")[f"{name}{SERIES}"]


def test_metrics_carry_vllm_033_names_and_labels(mock_vllm):
    url = mock_vllm()
    status, _ = post(f"{url}/v1/completions", {"prompt": "hi", "max_tokens": 3})
    assert status == 200
    samples = scrape(f"{url}/metrics")
    for name in VLLM_GAUGES:
        assert samples[f"{name}{SERIES}"] == 0.0
    assert samples[f"vllm:generation_tokens_total{SERIES}"] == 3.0
    assert samples[f"vllm:inter_token_latency_seconds_count{SERIES}"] == 2.0
    (config,) = (k for k in samples if k.startswith("vllm:cache_config_info{"))
    assert 'engine="0"' in config and 'num_gpu_blocks="8192"' in config
    # Gone in vLLM 0.33, so gone here: a reporter must not depend on them.
    gone = ("vllm:gpu_cache_usage_perc", "vllm:time_per_output")
    assert not any(k.startswith(gone) for k in samples)


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


async def _worst_gaps_beside_a_long_prompt(url: str) -> list[float]:
    """Three short streams decoding while a 32K-token prompt arrives: each one's longest
    wait between tokens."""
    short = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 150, "ignore_eos": True}
    long_prompt = {"messages": [{"role": "user", "content": "x" * 4 * 32_768}], "max_tokens": 2}
    async with aiohttp.ClientSession() as session:
        streams = [asyncio.create_task(_stream_token_times(session, url, short)) for _ in range(3)]
        await wait_until(lambda: gauge(url, "vllm:num_requests_running") == 3)
        async with session.post(f"{url}/v1/chat/completions", json=long_prompt) as response:
            assert response.status == 200
        results = await asyncio.gather(*streams)
    for times in results:
        assert len(times) == 150
    return [max(b - a for a, b in itertools.pairwise(times)) for times in results]


# Real time at a quarter speed: decode steps of ~6 ms, a 32K-token prefill of 0.5 s.
SCALE = 0.25
LONG_PREFILL_SECONDS = 32_768 / 16_384 * SCALE


@pytest.mark.asyncio
async def test_unchunked_a_long_prompt_stalls_concurrent_short_streams(mock_vllm):
    url = mock_vllm("--time-scale", str(SCALE), "--no-chunked-prefill")
    for worst_gap in await _worst_gaps_beside_a_long_prompt(url):
        # No scheduling delay can make the stall shorter than the prefill itself.
        assert worst_gap >= LONG_PREFILL_SECONDS * 0.95


@pytest.mark.asyncio
async def test_chunked_prefill_bounds_the_stall_to_a_chunk(mock_vllm):
    url = mock_vllm("--time-scale", str(SCALE))  # vLLM's default: chunks of 2048 tokens
    chunk_step = (0.025 + 2048 / 16_384) * SCALE
    for worst_gap in await _worst_gaps_beside_a_long_prompt(url):
        # A chunk and a decode step at most (and room for a loaded machine), far below
        # the whole prefill's stall.
        assert worst_gap < LONG_PREFILL_SECONDS / 2
        assert worst_gap >= chunk_step * 0.5  # the chunks did slow the decode


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
        # Too long a prompt, too many tokens asked for: vLLM 0.33's one combined answer.
        ({"messages": [{"role": "user", "content": "x" * 8000}]}, 400, "input_tokens"),
        ({"prompt": "x", "max_tokens": 1000}, 400, "input_tokens"),
        # Beyond aiohttp's default 1 MiB body limit: still vLLM's context-length answer.
        ({"messages": [{"role": "user", "content": "x" * 2_000_000}]}, 400, "input_tokens"),
        ({"model": "other", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ]
    for body, status, param in cases:
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        got, answer = post(url + path, body)
        assert got == status, (body, answer)
        assert answer["error"]["code"] == status
        assert answer["error"]["param"] == param
        assert answer["error"]["message"]


def post_with(url: str, body: dict, headers: dict) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, dict(response.headers), json.load(response)


def test_shapes_of_vllm_033(mock_vllm):
    url = mock_vllm("--time-scale", "0.01")
    # /v1/completions without max_tokens stops at 16 tokens.
    status, answer = post(f"{url}/v1/completions", {"prompt": "hi", "ignore_eos": True})
    assert (status, answer["usage"]["completion_tokens"]) == (200, 16)
    # Under fcfs a priority is accepted and ignored, not refused.
    status, _ = post(f"{url}/v1/completions", {"prompt": "hi", "priority": 1})
    assert status == 200
    # Streamed chunks carry no usage field; the usage comes last, alone, with no choices.
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        events = [
            json.loads(line[6:])
            for line in response.read().decode().splitlines()
            if line.startswith("data: {")
        ]
    assert all("usage" not in event for event in events[:-1])
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 3


def test_the_priority_header_is_read_as_vllm_reads_it(mock_vllm):
    url = mock_vllm("--scheduling-policy", "priority", "--time-scale", "0.01")
    chat_body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "priority": 5}
    for header, used in (("-100", "-100"), (" 7 ", "7"), ("high", "5")):
        # Any case of the name; an integer overrides the body, anything else is ignored.
        _, headers, _ = post_with(
            f"{url}/v1/chat/completions", chat_body, {"X-VLLM-PRIORITY": header}
        )
        assert headers["x-mock-saw-priority"] == used
        assert headers["x-mock-saw-x-vllm-priority"] == header.strip()


@pytest.mark.asyncio
async def test_the_priority_header_jumps_the_engine_queue(mock_vllm):
    url = mock_vllm("--scheduling-policy", "priority", "--max-num-seqs", "1", "--time-scale", "0.1")
    order = []

    async def run(session, name, body_priority, headers=None):
        body = {
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "priority": body_priority,
        }
        async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as r:
            assert r.status == 200
            await r.read()
        order.append(name)

    busy = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "ignore_eos": True}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{url}/v1/chat/completions", json={**busy, "stream": True}) as r:
            await r.content.readline()  # the one seat is taken
            first = asyncio.create_task(run(session, "body 0", 0))
            await wait_until(lambda: gauge(url, "vllm:num_requests_waiting") == 1)
            second = asyncio.create_task(
                run(session, "body 5, header -100", 5, {"x-vllm-priority": "-100"})
            )
            await wait_until(lambda: gauge(url, "vllm:num_requests_waiting") == 2)
            await r.read()
        await asyncio.gather(first, second)
    assert order == ["body 5, header -100", "body 0"]


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
    assert samples[f"vllm:num_preemptions_total{SERIES}"] >= 1
