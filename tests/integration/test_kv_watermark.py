"""Overload shedding end to end: a mock GPU fills up, its reporter tells the sidecar, and
Envoy's clients see P2 shed below 15 % free KV, P1 below 8 %, P0 never; then the load
falls and the tiers come back."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import grpc
import pytest

from sidecar.generated.qos.v1 import load_report_pb2, load_report_pb2_grpc
from sidecar.loops.overload import report_auth
from sidecar.tooling.stack.stack import Stack, StackOptions
from tests.integration.helpers import scrape, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

BLOCK = 16
KV_BLOCKS = 625  # 10 000 tokens
KEYS = {"p0": "kv-p0", "p1": "kv-p1", "p2": "kv-p2"}
# A slow mock GPU: a decode step every 2 s (the KV in use barely grows), prompts
# prefilled whole (a filler takes its blocks at once).
SLOW_GPU = (
    "--kv-cache-tokens",
    str(KV_BLOCKS * BLOCK),
    "--decode-step-ms",
    "2000",
    "--no-chunked-prefill",
)


@pytest.fixture(scope="module")
def kv_stack(tmp_path_factory):
    """One slow mock GPU (a decode step every 2 s: the KV in use barely grows; prompts are
    prefilled whole, so a filler takes its blocks at once) and its reporter, the sidecar,
    Envoy."""
    options = StackOptions.on_free_ports(
        tmp_path_factory.mktemp("kv-stack"),
        replicas=1,
        envoy_concurrency=1,
        mock_args=SLOW_GPU,
    )
    with Stack(options) as stack:
        config = stack.config
        for tier, key in KEYS.items():
            config.tenant(f"tenant-{tier}", tier, key)
        config.set({"tiers": {"p0": {"max_prompt_tokens": None}}})
        yield stack


def filling(blocks: int) -> dict:
    """A P0 request whose prompt takes exactly `blocks` KV blocks once prefilled."""
    chars = 4 * (BLOCK * blocks - 1 - 4)  # the mock counts chars/4 + 4 per message
    return {
        "messages": [{"role": "user", "content": "x" * chars}],
        "max_tokens": 512,
        "ignore_eos": True,
        "stream": True,
    }


async def hold(session, url, body) -> None:
    async with session.post(
        f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEYS['p0']}"}
    ) as response:
        assert response.status == 200
        async for _ in response.content:
            pass


async def probe(session, url, tier) -> str:
    """What Envoy's client sees for a one-token request of `tier`: admit or the shed reason."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    async with session.post(
        f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEYS[tier]}"}
    ) as response:
        assert response.status == 200
        answer = await response.json()
        if "x-mock-saw-x-qos-tier" in response.headers:
            return "admit"
        assert answer["choices"][0]["finish_reason"] == "load_shedding_fallback"
        return response.headers["x-qos-decision"]


def shedding(stack, tier) -> bool:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return samples.get(f'qos_overload_shedding{{rule="shed_kv_watermark",tier="{tier}"}}') == 1


def free_kv(stack) -> float:
    return scrape(f"{stack.sidecar_admin_url}/metrics").get("qos_cluster_free_kv_ratio{}", -1)


async def test_tiers_are_shed_as_kv_fills_and_come_back_as_it_drains(kv_stack):
    url = kv_stack.envoy_url
    async with aiohttp.ClientSession() as session:
        assert [await probe(session, url, t) for t in KEYS] == ["admit"] * 3
        fillers = [asyncio.create_task(hold(session, url, filling(553)))]
        try:
            # 553 (then 554) of 625 blocks: about 11.5 % free. (P2 is shed from the
            # filler's admission on, projected; here the pod's report says it too.)
            await wait_until(lambda: free_kv(kv_stack) < 0.15, what="the fill reported")
            assert shedding(kv_stack, "p2") and free_kv(kv_stack) > 0.08
            assert [await probe(session, url, t) for t in KEYS] == [
                "admit",
                "admit",
                "shed_kv_watermark",
            ]

            fillers.append(asyncio.create_task(hold(session, url, filling(43))))
            # 597 of 625 blocks: about 4.5 % free.
            await wait_until(lambda: free_kv(kv_stack) < 0.08, what="the fill reported")
            assert shedding(kv_stack, "p1")
            assert [await probe(session, url, t) for t in KEYS] == [
                "admit",
                "shed_kv_watermark",
                "shed_kv_watermark",
            ]
        finally:
            for filler in fillers:
                filler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await filler
        # The clients left: the engine frees their blocks, the reports say so.
        await wait_until(
            lambda: not shedding(kv_stack, "p1") and not shedding(kv_stack, "p2"), what="tiers back"
        )
        assert free_kv(kv_stack) > 0.17
        assert [await probe(session, url, t) for t in KEYS] == ["admit"] * 3


async def test_a_report_without_the_token_changes_no_decision(kv_stack):
    """A pod said full by someone who reached the gRPC port, without the report token:
    refused, and P2 is admitted through Envoy as before."""
    fake = load_report_pb2.LoadReport(
        pod_id="evil-pod", kv_cache_usage=0.99, kv_blocks_total=100_000, num_requests_waiting=500
    )
    async with grpc.aio.insecure_channel(kv_stack.sidecar_grpc) as channel:
        stub = load_report_pb2_grpc.LoadReporterStub(channel)
        for metadata in (None, report_auth.credentials("a-guess")):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Report(fake, timeout=5, metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    async with aiohttp.ClientSession() as session:
        for _ in range(5):
            assert await probe(session, kv_stack.envoy_url, "p2") == "admit"
    samples = scrape(f"{kv_stack.sidecar_admin_url}/metrics")
    assert samples['qos_load_reports_refused_total{reason="unauthenticated"}'] >= 2
    assert 'qos_pod_kv_cache_usage_ratio{pod="evil-pod"}' not in samples
