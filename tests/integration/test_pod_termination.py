"""The gateway pod's leaving, as the Kubernetes manifests ship it, run here as the kubelet
runs it: both containers' preStop hooks at once, each container signalled (SIGTERM) when
its own hook ends. Real Envoy and sidecar, a 60 s stream in flight: it completes; new
connections are served while the pod's removal spreads, then refused; both processes
exit within the pod's grace period."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import sys
import time

import aiohttp
import pytest

from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.stack import Stack
from tests.integration.helpers import built, named, stack_with_tenant, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY = "leaving-p0"
STREAM_TOKENS = 512  # P0's longest answer by default
STREAM_SECONDS = 60.0
# The mock's time scale that makes that answer last 60 s (a decode step is 25 ms at 1).
TIME_SCALE = STREAM_SECONDS / (STREAM_TOKENS * 0.025)
SHIPPED_STATE = "/var/lib/qos-sidecar"


def shipped_sequence() -> tuple[int, list[str], list[str]]:
    """The grace period, and Envoy's and the sidecar's preStop commands, as built."""
    spec = named(built(), "Deployment", "qos-gateway")["spec"]["template"]["spec"]
    hooks = {c["name"]: c["lifecycle"]["preStop"]["exec"]["command"] for c in spec["containers"]}
    return spec["terminationGracePeriodSeconds"], hooks["envoy"], hooks["sidecar"]


def here(stack: Stack, envoy_hook: list[str], sidecar_hook: list[str]):
    """The hooks as this machine runs them: the state directory the stack's, the sidecar's
    command this checkout's, Envoy's admin the stack's (the pod's loopback)."""
    state = str(stack.state.path)
    envoy = [part.replace(SHIPPED_STATE, state) for part in envoy_hook]
    assert sidecar_hook[0] == "qos-sidecar"
    sidecar = [sys.executable, "-m", "sidecar", *sidecar_hook[1:]]
    environment = {"QOS_STATE_DIR": state, "QOS_ENVOY_ADMIN": stack.envoy_admin_url}
    return envoy, sidecar, environment


def stack_holds_one(stack: Stack) -> bool:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return samples.get('qos_requests_in_flight{tier="p0"}', 0.0) == 1


def refused(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED


async def stream(session: aiohttp.ClientSession, url: str) -> tuple[int, bool]:
    """A long streamed answer: the tokens it got, and whether it ended with [DONE]."""
    body = {
        "model": "mock-llm",
        "messages": [{"role": "user", "content": "tell me everything"}],
        "max_tokens": STREAM_TOKENS,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {KEY}"}
    tokens, done = 0, False
    async with session.post(f"{url}/v1/chat/completions", json=body, headers=headers) as answer:
        assert answer.status == 200
        async for line in answer.content:
            data = line.decode().strip().removeprefix("data: ")
            if data == "[DONE]":
                done = True
            elif data:
                chunk = json.loads(data)
                tokens += sum(1 for choice in chunk["choices"] if choice["delta"].get("content"))
    return tokens, done


async def kubelet(hook: list[str], environment: dict[str, str], container) -> float:
    """Run a container's preStop hook, then signal the container: when it was signalled."""
    process = await asyncio.create_subprocess_exec(*hook, env={**os.environ, **environment})
    await process.wait()
    assert process.returncode == 0, hook
    container.send_signal(signal.SIGTERM)
    return time.monotonic()


@pytest.mark.timeout(300)
async def test_the_shipped_termination_cuts_no_stream(tmp_path):
    grace, envoy_hook, sidecar_hook = shipped_sequence()
    with stack_with_tenant(tmp_path, "pay", "p0", KEY, replicas=1, time_scale=TIME_SCALE) as stack:
        envoy_command, sidecar_command, environment = here(stack, envoy_hook, sidecar_hook)
        envoy, sidecar = stack.process("envoy"), stack.process("sidecar")
        port = stack.options.listen_port
        async with aiohttp.ClientSession() as session:
            long = asyncio.create_task(stream(session, stack.envoy_url))
            await wait_until(lambda: stack_holds_one(stack), what="the stream under way")
            started = time.monotonic()
            hooks = [
                asyncio.create_task(kubelet(envoy_command, environment, envoy)),
                asyncio.create_task(kubelet(sidecar_command, environment, sidecar)),
            ]
            # While the removal spreads, a new client is still served...
            async with aiohttp.ClientSession() as other:
                short = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
                headers = {"Authorization": f"Bearer {KEY}"}
                async with other.post(
                    f"{stack.envoy_url}/v1/chat/completions", json=short, headers=headers
                ) as answer:
                    assert answer.status == 200
            # ...then refused, while the long stream still runs.
            await wait_until(lambda: refused(port), within=15, what="new connections refused")
            assert not long.done()
            tokens, done = await long
            answered = time.monotonic()
            assert (tokens, done) == (STREAM_TOKENS, True)
            assert answered - started > STREAM_SECONDS * 0.7  # it ran on through the drain
            envoy_signalled, sidecar_signalled = await asyncio.gather(*hooks)
        exits = await asyncio.gather(
            asyncio.to_thread(envoy.wait, 60), asyncio.to_thread(sidecar.wait, 60)
        )
        assert exits == [0, 0]
        left = time.monotonic() - started
        assert left < grace, f"{left:.0f} s, past the grace of {grace} s"
        # Neither was signalled before the answer had ended.
        assert min(envoy_signalled, sidecar_signalled) >= answered
