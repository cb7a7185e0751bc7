"""Hostile clients through the real Envoy: oversized and spoofed headers, and bodies or
headers trickled in to hold connections. Each gets a clear OpenAI-shaped refusal, and
everyone else is served meanwhile."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from sidecar.config.schema import QosConfig
from sidecar.ports import free_port
from sidecar.tooling.stack import envoy_config
from sidecar.tooling.stack.stack import start_envoy
from tests.integration.helpers import scrape

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
SLOW_CLIENTS = 20


async def chat(session, url, headers=None) -> tuple[int, dict, dict]:
    async with session.post(f"{url}/v1/chat/completions", json=BODY, headers=headers) as answer:
        return answer.status, dict(answer.headers), json.loads(await answer.read())


def assert_openai_error(body: dict, code: str) -> None:
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["message"]


async def test_oversized_headers_get_an_openai_error_and_others_are_served(stack):
    async with aiohttp.ClientSession() as session:
        status, _, body = await chat(session, stack.envoy_url, {"x-junk": "a" * 100_000})
        assert status == 431
        assert_openai_error(body, "request_headers_too_large")

        many = {f"x-junk-{i}": "a" for i in range(150)}
        status, _, body = await chat(session, stack.envoy_url, many)
        assert status == 431
        assert_openai_error(body, "request_headers_too_large")

        # A 40 KB API key is within Envoy's limits: the sidecar hashes it like any key.
        status, headers, body = await chat(
            session, stack.envoy_url, {"Authorization": "Bearer " + "k" * 40_000}
        )
        assert status == 200 and body["object"] == "chat.completion", body
        assert headers["x-mock-saw-x-qos-tenant"] == "anonymous"

        status, _, body = await chat(session, stack.envoy_url)
        assert status == 200 and body["object"] == "chat.completion"


async def test_spoofed_tier_headers_never_reach_the_gpu(stack):
    spoofed = {"x-qos-tier": "p0", "x_qos_tier": "p0", "x-qos-slot": "stolen"}
    async with aiohttp.ClientSession() as session:
        status, headers, _ = await chat(session, stack.envoy_url, spoofed)
    assert status == 200
    seen = {name: value for name, value in headers.items() if name.startswith("x-mock-saw-")}
    # Only what the sidecar set: the default tier for an anonymous caller; no slot id,
    # neither the client's nor the sidecar's (the access log alone may name a slot).
    assert seen["x-mock-saw-x-qos-tier"] == QosConfig().identity.default_tier.value
    assert "x-mock-saw-x-qos-slot" not in seen
    assert not any("_" in name for name in seen), seen


@pytest.fixture(scope="module")
def impatient_envoy(stack, tmp_path_factory):
    """A second Envoy with the shipped config in front of the same sidecar and GPUs, its
    request timeouts cut to 2 s (headers: 1 s) so a test can wait them out."""
    port, admin_port = free_port(), free_port()
    config = stack.envoy_config(port, admin_port)
    manager = envoy_config.connection_manager(config)
    manager["request_timeout"], manager["request_headers_timeout"] = "2s", "1s"
    envoy = start_envoy(
        config,
        tmp_path_factory.mktemp("impatient"),
        admin_port,
        "envoy-impatient",
        1,
        stack.envoy_env,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        envoy.stop()


async def trickle(port: int, head: bytes, drip: bytes) -> bytes:
    """Send `head`, then one byte of `drip` every 0.2 s until the server answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        await writer.drain()
        for byte in drip:
            try:
                return await asyncio.wait_for(reader.read(65536), 0.2)
            except TimeoutError:
                writer.write(bytes([byte]))
                await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


def parse_http(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.timeout(60)
async def test_trickled_bodies_and_headers_are_cut_and_hold_nothing(stack, impatient_envoy):
    port = int(impatient_envoy.rsplit(":", 1)[1])
    payload = json.dumps(BODY).encode()
    slow_body = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(payload)
    )
    slow_head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
    bodies = [asyncio.create_task(trickle(port, slow_body, payload)) for _ in range(SLOW_CLIENTS)]
    heads = [asyncio.create_task(trickle(port, slow_head, b"x" * 200)) for _ in range(5)]

    # Meanwhile everyone else is served at once, through the same Envoy and sidecar.
    async with aiohttp.ClientSession() as session:
        for _ in range(10):
            status, _, answer = await chat(session, impatient_envoy)
            assert status == 200 and answer["object"] == "chat.completion"
    assert not any(task.done() for task in bodies)  # still trickling, still held by Envoy

    for raw in await asyncio.gather(*bodies):
        status, body = parse_http(raw)
        assert status == 408
        assert_openai_error(body, "request_timeout")
    for raw in await asyncio.gather(*heads):
        assert parse_http(raw)[0] == 408

    # The sidecar decided nothing for them and holds no slot for them.
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    assert sum(v for k, v in samples.items() if k.startswith("qos_requests_in_flight{")) == 0
