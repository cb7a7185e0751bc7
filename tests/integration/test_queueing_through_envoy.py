"""The admission queue through real Envoy: holds past Envoy's message timeout, releases
on the access-log stream, leaves no slot behind when clients abort."""

from __future__ import annotations

import asyncio
import contextlib
import random

import aiohttp
import pytest

from tests.integration.helpers import ext_proc_messages, scrape, stack_with_tenants, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p0": "q-p0", "p1": "q-p1", "p2": "q-p2"}


@pytest.fixture(scope="module")
def queue_stack(tmp_path_factory):
    """Two fast mock GPUs with priority scheduling, reporters, the sidecar, Envoy."""
    with stack_with_tenants(
        tmp_path_factory.mktemp("queue-stack"),
        {f"queue-{tier}": (tier, key) for tier, key in KEYS.items()},
        time_scale=0.02,
        mock_args=("--scheduling-policy", "priority"),
    ) as stack:
        yield stack


@pytest.fixture
def config(queue_stack):
    config = queue_stack.config
    yield config
    config.set({})


def chat(tokens: int, stream: bool = False) -> dict:
    return {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": stream,
    }


def post(session, stack, tier, body):
    return session.post(
        f"{stack.envoy_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEYS[tier]}"},
    )


def sidecar_gauges(stack) -> tuple[float, float]:
    """(slots held, requests waiting) over all tiers."""
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    held = sum(v for k, v in samples.items() if k.startswith("qos_requests_in_flight{"))
    waiting = sum(v for k, v in samples.items() if k.startswith("qos_queue_waiting{"))
    return held, waiting


async def test_a_held_request_waits_past_envoys_message_timeout_then_runs(queue_stack, config):
    config.set({"fleet": {"max_concurrency": 1}})
    async with aiohttp.ClientSession() as session:
        # 40 decode steps of 0.5 ms... at time-scale 0.02 a 2000-token answer takes ~1 s.
        async with post(session, queue_stack, "p1", chat(2000, stream=True)) as first:
            await first.content.readline()
            second = asyncio.create_task(_json(post(session, queue_stack, "p1", chat(3))))
            await wait_until(lambda: sidecar_gauges(queue_stack)[1] == 1, what="one waiting")
            async for _ in first.content:
                pass
        status, headers, answer = await second
    assert status == 200
    assert answer["usage"]["completion_tokens"] == 3
    assert int(headers["x-mock-saw-x-qos-queue-wait-ms"]) >= 250  # past message_timeout
    await wait_until(lambda: sidecar_gauges(queue_stack) == (0, 0), what="all given back")


async def _json(request) -> tuple[int, dict, dict]:
    async with request as response:
        return response.status, dict(response.headers), await response.json()


async def test_a_client_that_leaves_the_queue_frees_its_place(queue_stack, config):
    config.set({"fleet": {"max_concurrency": 1}})
    async with (
        aiohttp.ClientSession() as session,
        post(session, queue_stack, "p1", chat(2000, stream=True)) as first,
    ):
        await first.content.readline()
        leaver = asyncio.create_task(_json(post(session, queue_stack, "p1", chat(3))))
        await wait_until(lambda: sidecar_gauges(queue_stack)[1] == 1)
        leaver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await leaver
        await wait_until(lambda: sidecar_gauges(queue_stack)[1] == 0, what="queue left")
        assert sidecar_gauges(queue_stack)[0] == 1  # the first still runs
    await wait_until(lambda: sidecar_gauges(queue_stack) == (0, 0), what="all given back")


async def test_the_tiers_priority_reaches_vllm(queue_stack, config):
    config.set({"engine": {"send_priority": True}})
    async with aiohttp.ClientSession() as session:
        answers = [
            await _json(post(session, queue_stack, tier, chat(1))) for tier in ("p0", "p1", "p2")
        ]
    seen = [headers.get("x-mock-saw-priority") for _, headers, _ in answers]
    assert seen == ["0", "1", "2"], answers


@pytest.mark.timeout(240)
async def test_ten_thousand_requests_with_a_fifth_aborted_leave_no_slot_held(queue_stack, config):
    config.set({"fleet": {"max_concurrency": 24}})
    rng = random.Random(7)
    outcomes = {"done": 0, "aborted": 0}

    async def one(session, index):
        tier = ("p0", "p1")[index % 2]
        stream = index % 3 == 0
        request = post(session, queue_stack, tier, chat(rng.randint(1, 30), stream))
        if rng.random() < 0.2:
            task = asyncio.create_task(_drain(request))
            await asyncio.sleep(rng.uniform(0, 0.02))
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            outcomes["aborted"] += 1
        else:
            await _drain(request)
            outcomes["done"] += 1

    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:
        work = asyncio.Queue()
        for index in range(10_000):
            work.put_nowait(index)

        async def client():
            while not work.empty():
                await one(session, work.get_nowait())

        await asyncio.gather(*(client() for _ in range(64)))
    assert outcomes["done"] + outcomes["aborted"] == 10_000
    assert 1500 < outcomes["aborted"] < 2500
    await wait_until(
        lambda: sidecar_gauges(queue_stack) == (0, 0),
        within=15,
        what="every slot given back, nobody waiting",
    )
    samples = scrape(f"{queue_stack.sidecar_admin_url}/metrics")
    admitted = sum(
        v
        for k, v in samples.items()
        if k.startswith("qos_decisions_total{") and 'outcome="admit"' in k
    )
    ends = sum(v for k, v in samples.items() if k.startswith("qos_exchange_ends_total{"))
    assert ends == admitted  # each admitted exchange's slot came back exactly once
    waits = sum(v for k, v in samples.items() if k.startswith("qos_queue_wait_seconds_count{"))
    at_once = sum(
        v
        for k, v in samples.items()
        if k.startswith("qos_queue_wait_seconds_bucket{") and 'le="0.001"' in k
    )
    assert waits > at_once  # some of them did wait in the queue
    assert any(
        'how="client_gone"' in k or 'how="before_response"' in k
        for k, v in samples.items()
        if k.startswith("qos_exchange_ends_total{") and v
    )


async def _drain(request) -> None:
    async with request as response:
        async for _ in response.content.iter_any():
            pass


async def test_a_long_stream_keeps_its_slot_until_it_ends(queue_stack, config):
    """Its ext_proc stream stays open as long as the exchange (Envoy is not asked for the
    response): the slot is given back when the answer ends, not earlier."""
    config.set({"slo": {"ttft_sample_rate": 0.0}})  # no response watched
    # 5000 tokens of 0.5 ms: about 2.5 s, beyond the 1 s grace of an ended stream.
    async with (
        aiohttp.ClientSession() as session,
        post(session, queue_stack, "p2", chat(5000, stream=True)) as answer,
    ):
        assert answer.status == 200
        await answer.content.readline()
        await asyncio.sleep(1.5)
        assert sidecar_gauges(queue_stack)[0] == 1  # still streaming: still held
        await answer.read()
    await wait_until(lambda: sidecar_gauges(queue_stack) == (0, 0), what="slot given back")


async def test_a_watched_stream_is_let_go_after_its_first_token_and_keeps_its_slot(
    queue_stack, config
):
    """Once its first token is timed the sidecar closes its ext_proc stream: Envoy streams
    the rest alone, and the access log still gives the slot back at the end."""
    config.set({"slo": {"ttft_sample_rate": 1.0}})
    before = ext_proc_messages(queue_stack)
    async with (
        aiohttp.ClientSession() as session,
        post(session, queue_stack, "p2", chat(5000, stream=True)) as answer,
    ):
        assert answer.status == 200
        first = await answer.content.readline()
        await asyncio.sleep(1.5)
        assert sidecar_gauges(queue_stack)[0] == 1  # still streaming: still held
        rest = await answer.read()
    whole = first + rest
    assert whole.count(b'"content":') - whole.count(b'"content":""') == 5000
    assert rest.rstrip().endswith(b"data: [DONE]")
    sent, _ = ext_proc_messages(queue_stack)
    # Headers, body, response headers and the chunks up to the first token, and the few
    # that Envoy sent in the instant before the sidecar's close reached it (a token every
    # 0.5 ms here); not 5000.
    assert sent - before[0] <= 12
    await wait_until(lambda: sidecar_gauges(queue_stack) == (0, 0), what="slot given back")
