"""Each model server's metric dialect, end to end: a mock GPU speaking it fills up, the
reporter reads it (the dialect found from the exposition), and Envoy's clients see P2
shed at the 15 % free-KV watermark; a TGI or llama.cpp pod, which has no KV gauge, sheds
P2 by the in-flight rule instead."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from sidecar.tooling.stack.stack import Stack, StackOptions
from tests.integration.helpers import scrape, wait_until
from tests.integration.test_kv_watermark import KEYS, SLOW_GPU, filling, hold, probe

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KV_DIALECTS = ("vllm", "sglang", "trtllm", "triton")
MAX_CONCURRENCY = 10


@pytest.fixture(scope="module", params=[*KV_DIALECTS, "tgi", "llamacpp"])
def dialect_stack(request, tmp_path_factory):
    """One slow mock GPU speaking the dialect (a decode step every 2 s, prompts prefilled
    whole: a filler takes its blocks at once), its reporter, the sidecar, Envoy."""
    dialect = request.param
    options = StackOptions.on_free_ports(
        tmp_path_factory.mktemp(f"dialect-{dialect}"),
        replicas=1,
        envoy_concurrency=1,
        mock_args=(*SLOW_GPU, "--metrics-dialect", dialect),
    )
    with Stack(options) as stack:
        for tier, key in KEYS.items():
            stack.config.tenant(f"tenant-{tier}", tier, key)
        stack.config.set(
            {
                "tiers": {"p0": {"max_prompt_tokens": None}},
                "fleet": {"max_concurrency": MAX_CONCURRENCY},
            }
        )
        yield dialect, stack


def metric(stack: Stack, name: str) -> float | None:
    return scrape(f"{stack.sidecar_admin_url}/metrics").get(name)


async def test_a_pod_speaking_the_dialect_drives_p2_shedding(dialect_stack):
    dialect, stack = dialect_stack
    url = stack.envoy_url
    await wait_until(lambda: metric(stack, "qos_pods_reporting{}") == 1, what="the pod reports")
    async with aiohttp.ClientSession() as session:
        assert [await probe(session, url, t) for t in KEYS] == ["admit"] * 3
        if dialect in KV_DIALECTS:
            fillers = [asyncio.create_task(hold(session, url, filling(553)))]
            reason = "shed_kv_watermark"
            # 553 (then 554) of 625 blocks: about 11.5 % free, as the pod reports it.
            reported = lambda: (metric(stack, "qos_cluster_free_kv_ratio{}") or 1.0) < 0.15  # noqa: E731
        else:
            # No KV gauge: free KV stays unknown, the pod's running requests count.
            small = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 512}
            fillers = [
                asyncio.create_task(
                    hold(session, url, {**small, "ignore_eos": True, "stream": True})
                )
                for _ in range(MAX_CONCURRENCY - 1)
            ]
            reason = "shed_inflight"
            reported = lambda: (  # noqa: E731
                metric(stack, "qos_cluster_requests_in_flight{}") == MAX_CONCURRENCY - 1
            )
        try:
            await wait_until(reported, what=f"the {dialect} pod's load reported")
            if dialect not in KV_DIALECTS:
                assert metric(stack, "qos_cluster_free_kv_ratio{}") is None
            assert [await probe(session, url, t) for t in KEYS] == ["admit", "admit", reason]
        finally:
            for filler in fillers:
                filler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await filler
