"""Projected load through real Envoy: a burst of P2 inside one report interval, against a
GPU at 20 % free KV, stops where the projection reaches the 15 % watermark instead of
running the KV cache past it; with projection off the whole burst goes in.

The pod's reporter is stopped once the GPU is filled (its last report counts for the
test's 30 s TTL): nothing the burst does can reach the sidecar through a report, so the
burst is inside one report interval however slowly this machine sends it, and is paced
only so that every request is decided (see SPACING_SECONDS)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import grpc
import pytest

from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.generated.qos.v1 import load_report_pb2, load_report_pb2_grpc
from sidecar.loops.overload import report_auth
from sidecar.tooling.extproc_client import ExtProcClient, admitted
from sidecar.tooling.stack.readiness import pods_reporting
from sidecar.tooling.stack.stack import Stack, StackOptions
from tests.integration.helpers import REPORT_TOKEN, decision_count, scrape, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

BLOCK = 16
KV_BLOCKS = 2_000
FILLED = 1_600  # 80 % in use: 20 % free
BURST = 300
KEYS = {"p0": "proj-p0", "p2": "proj-p2"}
# 48 characters in one message: 16 prompt tokens (the mock counts chars/4 + 4), two KV
# blocks with the first output token, and still two with all eight.
P2_CHAT = {"messages": [{"role": "user", "content": "x" * 48}], "max_tokens": 8}
P2_BLOCKS = 2
WATERMARK = 0.15
HEADROOM = KV_BLOCKS * 5 // 100 // P2_BLOCKS  # requests from 20 % free to the watermark
# 300 requests in 1.2 s: every one decided within Envoy's 250 ms message timeout on this
# shared 2-core machine (past it Envoy sends a request on undecided: failure_mode_allow).
SPACING_SECONDS = 0.004


@pytest.fixture(scope="module")
def projected_stack(tmp_path_factory):
    """One mock GPU of 2 000 blocks, prompts prefilled whole, a decode step every 0.5 s
    (an admitted P2 request holds its blocks for 4 s); its reporter every 250 ms."""
    options = StackOptions.on_free_ports(
        tmp_path_factory.mktemp("projected-stack"),
        replicas=1,
        envoy_concurrency=1,
        report_interval=0.25,
        mock_args=(
            "--kv-cache-tokens",
            str(KV_BLOCKS * BLOCK),
            "--decode-step-ms",
            "500",
            "--no-chunked-prefill",
        ),
    )
    with Stack(options) as stack:
        for tier, key in KEYS.items():
            stack.config.tenant(f"tenant-{tier}", tier, key)
        stack.config.set(config(project=True))
        yield stack


def config(project: bool) -> dict:
    return {
        # Budgets wide enough for the filler's 25 600-token prompt: only load decides here.
        "fleet": {"capacity_tokens_per_second": 500_000},
        "tiers": {"p0": {"max_prompt_tokens": None}},
        "overload": {"report_ttl_seconds": 30, "project_admissions": project},
    }


def filling(blocks: int) -> dict:
    """A P0 stream whose prompt takes exactly `blocks` KV blocks once prefilled."""
    chars = 4 * (BLOCK * blocks - 1 - 4)
    return {
        "messages": [{"role": "user", "content": "x" * chars}],
        "max_tokens": 8,
        "ignore_eos": True,
        "stream": True,
    }


async def hold(session, url: str) -> None:
    async with session.post(
        f"{url}/v1/chat/completions",
        json=filling(FILLED),
        headers={"Authorization": f"Bearer {KEYS['p0']}"},
    ) as response:
        assert response.status == 200
        async for _ in response.content:
            pass


async def p2_request(session, url: str) -> bool:
    """One P2 chat through Envoy: True when it reached the GPU."""
    async with session.post(
        f"{url}/v1/chat/completions",
        json={**P2_CHAT, "ignore_eos": True},
        headers={"Authorization": f"Bearer {KEYS['p2']}"},
    ) as response:
        assert response.status == 200
        await response.read()
        return "x-mock-saw-x-qos-tier" in response.headers


def pool_metric(stack: Stack, name: str) -> float:
    return scrape(f"{stack.sidecar_admin_url}/metrics")[f'{name}{{pool="default"}}']


def decisions(stack: Stack) -> float:
    url = stack.sidecar_admin_url
    return decision_count(url, "admit") + decision_count(url, "respond")


def mock_free_kv(stack: Stack) -> float:
    samples = scrape(f"{stack.engine_urls[0]}/metrics")
    usage = next(v for k, v in samples.items() if k.startswith("vllm:kv_cache_usage_perc{"))
    return 1.0 - usage


async def burst_at_20_percent_free(stack: Stack) -> tuple[int, float]:
    """Fill the GPU to 20 % free, let that be reported, stop the reports, send 300 P2
    requests at once: how many reached the GPU, and its free KV once all were decided."""
    url = stack.envoy_url
    reporter = stack.process("reporter-1")
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        filler = asyncio.create_task(hold(session, url))
        try:
            # Reported, and the filler's own admission forgotten by the projection: a
            # report taken within the overlap of that admission may count it twice until
            # the next one, and the reporter stops here.
            await wait_until(
                lambda: all(
                    abs(pool_metric(stack, name) - 0.20) < 0.002
                    for name in ("qos_pool_free_kv_ratio", "qos_pool_projected_free_kv_ratio")
                ),
                what="20 % free reported and projected",
            )
            reporter.stop()
            decided = decisions(stack)
            requests = []
            for _ in range(BURST):  # paced, so the sidecar decides each in Envoy's time
                requests.append(asyncio.create_task(p2_request(session, url)))
                await asyncio.sleep(SPACING_SECONDS)
            await wait_until(
                lambda: decisions(stack) >= decided + BURST, within=30, what="the burst decided"
            )
            free_after = mock_free_kv(stack)
            admitted = sum(await asyncio.gather(*requests))
        finally:
            filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await filler
            if not reporter.running():
                reporter.start()
        # The GPU empties (its clients left or were answered), the reports say so.
        await wait_until(
            lambda: pool_metric(stack, "qos_pool_free_kv_ratio") > 0.99, what="KV drained"
        )
    return admitted, free_after


async def test_a_burst_stops_at_the_watermark_projected_between_reports(projected_stack):
    admitted, free_after = await burst_at_20_percent_free(projected_stack)
    # 5 % of 2 000 blocks between 20 % and the watermark: 50 two-block requests (give or
    # take one: the line is reached to within floating point, and the GPU's own count).
    assert HEADROOM - 1 <= admitted <= HEADROOM + 1, admitted
    assert free_after >= WATERMARK - 0.02, free_after


async def test_without_projection_the_whole_burst_goes_in(projected_stack):
    projected_stack.config.set(config(project=False))
    try:
        admitted, free_after = await burst_at_20_percent_free(projected_stack)
    finally:
        projected_stack.config.set(config(project=True))
    assert admitted > 2 * HEADROOM, admitted
    assert free_after < WATERMARK - 0.02, free_after


async def report_80_percent_used(address: str, token: str = REPORT_TOKEN) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = load_report_pb2_grpc.LoadReporterStub(channel)
        report = load_report_pb2.LoadReport(
            pod_id="gpu-1", kv_cache_usage=0.80, kv_blocks_total=KV_BLOCKS, kv_block_size=BLOCK
        )
        await stub.Report(report, timeout=5, metadata=report_auth.credentials(token))


def sidecar_metric(sidecar, name: str) -> float:
    return scrape(f"{sidecar.admin_url}/metrics").get(f'{name}{{pool="default"}}', -1.0)


async def test_every_sidecar_projects_what_the_others_admitted_until_a_newer_report(
    sidecars, aredis
):
    store = ConfigStore(aredis)
    await store.save_config(QosConfig.from_partial(config(project=True)))
    await store.put_tenant("tenant-p2", Tenant(tier=Tier.P2), KEYS["p2"])
    first, second = sidecars(), sidecars()
    await report_80_percent_used(first.grpc_address)
    await wait_until(
        lambda: all(pods_reporting(s.admin_url) == 1 for s in (first, second)),
        what="the pod seen by both sidecars",
    )

    async with grpc.aio.insecure_channel(first.grpc_address) as channel:
        client = ExtProcClient(channel)
        admitted_here = 0
        while admitted(await client.decide(P2_CHAT, api_key=KEYS["p2"])):
            admitted_here += 1
            assert admitted_here <= BURST
    assert HEADROOM - 1 <= admitted_here <= HEADROOM + 1

    # The other sidecar reads what the first recorded with its budget calls...
    await wait_until(
        lambda: (
            sidecar_metric(second, "qos_pool_unreported_kv_blocks") == P2_BLOCKS * admitted_here
        ),
        what="the first sidecar's admissions seen",
    )
    assert sidecar_metric(second, "qos_pool_projected_free_kv_ratio") < WATERMARK + 0.001
    assert sidecar_metric(second, "qos_pool_free_kv_ratio") == pytest.approx(0.20)
    # It sheds P2 too: at once, or after one more when the first stopped right at the
    # line (its own refusal counted the request it refused; the records do not).
    async with grpc.aio.insecure_channel(second.grpc_address) as channel:
        client = ExtProcClient(channel)
        more = 0
        while admitted(shed := await client.decide(P2_CHAT, api_key=KEYS["p2"])):
            more += 1
            assert more <= 1, "the other sidecar admitted past the watermark"
    assert header(shed, "x-qos-decision") == "shed_kv_watermark"

    # ...until the pod reports after them (as its reporter would, every 100 ms: a report
    # received within the overlap of an admission may not show it, the next one does).
    deadline = time.monotonic() + 10
    while sidecar_metric(second, "qos_pool_unreported_kv_blocks") != 0:
        assert time.monotonic() < deadline, "admissions never forgotten after newer reports"
        await report_80_percent_used(second.grpc_address)
        await asyncio.sleep(0.1)
    async with grpc.aio.insecure_channel(second.grpc_address) as channel:
        assert admitted(await ExtProcClient(channel).decide(P2_CHAT, api_key=KEYS["p2"]))


def header(answer, name: str) -> str | None:
    for option in answer.immediate_response.headers.set_headers:
        if option.header.key == name:
            return option.header.raw_value.decode() or option.header.value
    return None
