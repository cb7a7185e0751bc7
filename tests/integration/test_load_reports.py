"""Pods' load reports: stored with a TTL in Redis, seen by every sidecar, and the reporter
that survives vLLM restarts and sidecar outages."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.generated.qos.v1 import load_report_pb2, load_report_pb2_grpc
from sidecar.loops.overload import report_auth
from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.readiness import pods_reporting
from sidecar.tooling.stack.stack import REPORT_TOKEN_ENV, start_sidecar
from tests.integration.helpers import REPORT_TOKEN, scrape, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def report(address: str, token: str = REPORT_TOKEN, **fields) -> load_report_pb2.ReportAck:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = load_report_pb2_grpc.LoadReporterStub(channel)
        return await stub.Report(
            load_report_pb2.LoadReport(**fields),
            timeout=5,
            metadata=report_auth.credentials(token) if token else None,
        )


async def test_reports_reach_every_sidecar_and_expire_after_their_ttl(sidecars, aredis):
    await ConfigStore(aredis).save_config(
        QosConfig.from_partial({"overload": {"report_ttl_seconds": 0.5}})
    )
    first, second = sidecars(), sidecars()
    ack = await report(
        first.grpc_address,
        pod_id="pod-a",
        kv_cache_usage=0.25,
        kv_blocks_total=1000,
        num_requests_running=3,
        num_requests_waiting=1,
    )
    assert ack.ttl_ms == 500
    await report(first.grpc_address, pod_id="pod-b", kv_cache_usage=0.75, kv_blocks_total=3000)
    # The second sidecar never got a report itself: it reads them from Redis.
    await wait_until(lambda: pods_reporting(second.admin_url) == 2, what="both pods seen")
    samples = scrape(f"{second.admin_url}/metrics")
    assert samples["qos_cluster_free_kv_ratio{}"] == pytest.approx((750 + 750) / 4000)
    assert samples["qos_cluster_requests_in_flight{}"] == 4
    assert samples['qos_pod_kv_cache_usage_ratio{pod="pod-a"}'] == pytest.approx(0.25)

    silent_since = time.monotonic()
    await wait_until(
        lambda: pods_reporting(second.admin_url) == 0, within=3, what="silent pods dropped"
    )
    assert time.monotonic() - silent_since >= 0.3  # not before the TTL has run
    assert scrape(f"{second.admin_url}/metrics")["qos_load_unknown{}"] == 1


async def test_malformed_reports_are_refused(sidecars):
    sidecar = sidecars()
    for fields in (
        {"pod_id": "", "kv_cache_usage": 0.1},
        {"pod_id": "p", "kv_cache_usage": 1.5},
        {"pod_id": "p", "kv_cache_usage": float("nan")},
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await report(sidecar.grpc_address, **fields)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert pods_reporting(sidecar.admin_url) == 0


async def test_a_report_without_the_token_is_refused_counted_and_never_applied(sidecars):
    sidecar = sidecars()
    full = {"pod_id": "evil-pod", "kv_cache_usage": 0.99, "num_requests_waiting": 500}
    for token in ("", "a-guess"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await report(sidecar.grpc_address, token=token, **full)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    samples = scrape(f"{sidecar.admin_url}/metrics")
    assert samples['qos_load_reports_refused_total{reason="unauthenticated"}'] == 2
    assert pods_reporting(sidecar.admin_url) == 0
    await report(sidecar.grpc_address, pod_id="real-pod", kv_cache_usage=0.1)
    await wait_until(lambda: pods_reporting(sidecar.admin_url) == 1, what="the real pod")


async def test_a_sidecar_without_a_token_takes_no_pushed_report_and_says_so(sidecars):
    sidecar = sidecars(env={REPORT_TOKEN_ENV: ""})
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await report(sidecar.grpc_address, pod_id="p", kv_cache_usage=0.1)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "QOS_REPORT_TOKEN" in refused.value.details()
    log = await asyncio.to_thread(sidecar.process.log_path.read_text)
    assert "pushed load reports are refused" in log


async def test_the_reporter_survives_vllm_restarts_and_sidecar_outages(
    tmp_path, redis_url, start_process
):
    mock_port = free_port()
    mock_url = f"http://127.0.0.1:{mock_port}"

    def start_mock():
        return start_process(
            f"mock-{time.monotonic_ns()}",
            "mock-vllm",
            "--port",
            str(mock_port),
            ready=lambda: readiness.http_ok(f"{mock_url}/health"),
        )

    grpc_port, admin_port = free_port(), free_port()
    admin = f"http://127.0.0.1:{admin_port}"

    def start_our_sidecar():
        return start_sidecar(
            tmp_path,
            redis_url,
            grpc_port=grpc_port,
            admin_port=admin_port,
            name=f"sidecar-{time.monotonic_ns()}",
            env={REPORT_TOKEN_ENV: REPORT_TOKEN},
        )

    mock = start_mock()
    sidecar = start_our_sidecar()
    reporter = start_process(
        "reporter",
        "report",
        "--vllm-url",
        mock_url,
        "--sidecar",
        f"127.0.0.1:{grpc_port}",
        "--pod-id",
        "pod-r",
        "--interval",
        "0.1",
        ready=lambda: pods_reporting(admin) == 1,
        env={REPORT_TOKEN_ENV: REPORT_TOKEN},
    )
    try:
        mock.stop()  # vLLM restarts: its reports stop, the pod goes stale
        await wait_until(lambda: pods_reporting(admin) == 0, within=5)
        start_mock()
        await wait_until(lambda: pods_reporting(admin) == 1, within=5)

        sidecar.process.stop()  # the sidecar is away for a while
        await wait_until(lambda: not readiness.grpc_serving(f"127.0.0.1:{grpc_port}"))
        sidecar = start_our_sidecar()
        await wait_until(lambda: pods_reporting(admin) == 1, within=5)
        assert reporter.running()
    finally:
        sidecar.process.stop()
    assert "cannot read" in reporter.log_tail(200)
    assert "reporting again" in reporter.log_tail(200)
