"""Mutual TLS on the sidecar's gRPC port: the whole stack over it (Envoy and the reporters
present a client certificate), plaintext and certificate-less clients refused, and the
certificate files read again when they change."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sidecar.grpc_tls import TlsFiles
from sidecar.loops.overload.reports import REPORTS_KEY, STAMPS_KEY
from sidecar.ports import free_port
from sidecar.tooling.stack import envoy_config, readiness
from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.certificates import LocalPki, make_local_pki
from sidecar.tooling.stack.processes import ManagedProcess
from sidecar.tooling.stack.stack import (
    REPORT_TOKEN_ENV,
    mock_vllm_argv,
    start_envoy,
    start_sidecar,
    tls_client_args,
)
from tests.integration.helpers import (
    REPORT_TOKEN,
    chat_once,
    cli,
    decision_count,
    kubernetes_envoy_here,
    recorded,
    recording_upstream,
    stack_with_tenants,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

P0_KEY, P2_KEY = "tls-pay", "tls-bulk"


def answers_health(address: str, credentials: grpc.ChannelCredentials | None) -> bool:
    channel = (
        grpc.secure_channel(address, credentials)
        if credentials is not None
        else grpc.insecure_channel(address)
    )
    with channel:
        try:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3)
        except grpc.RpcError:
            return False
    return True


async def test_the_stack_over_mutual_tls_serves_and_sheds_in_core_only(tmp_path):
    tenants = {"pay": ("p0", P0_KEY), "bulk": ("p2", P2_KEY)}
    with stack_with_tenants(tmp_path, tenants, tls=True) as stack:
        # Started: its reporters reported over TLS (the stack waits for every pod).
        client = stack.client_tls
        assert client is not None and client.ca is not None
        address = stack.sidecar_grpc
        assert answers_health(address, grpc.ssl_channel_credentials(*_client(client)))
        assert not answers_health(address, None)  # plaintext: refused
        ca_only = grpc.ssl_channel_credentials(client.ca.read_bytes())
        assert not answers_health(address, ca_only)  # TLS without a client certificate
        async with aiohttp.ClientSession() as session:
            assert await chat_once(session, stack.envoy_url, P0_KEY) == (200, None)
            assert (await chat_once(session, stack.envoy_url, P2_KEY))[0] == 200
            await cli(stack.redis_url, "mode", "set", "core-only", "--by", "tls-test")
            await wait_until(
                lambda: (
                    scrape(f"{stack.sidecar_admin_url}/metrics").get(
                        'qos_operator_mode{mode="core-only"}'
                    )
                    == 1
                ),
                what="core-only in force",
            )
            shed = await chat_once(session, stack.envoy_url, P2_KEY, header="x-qos-decision")
            assert shed == (200, "shed_core_only")  # P2's fallback, decided over TLS
            assert await chat_once(session, stack.envoy_url, P0_KEY) == (200, None)


def _client(files: TlsFiles) -> tuple[bytes, bytes, bytes]:
    assert files.ca and files.key and files.cert
    return files.ca.read_bytes(), files.key.read_bytes(), files.cert.read_bytes()


async def test_certificates_are_read_again_when_they_change(tmp_path, redis_url):
    first = make_local_pki(tmp_path / "first")
    second = make_local_pki(tmp_path / "second")
    sidecar = start_sidecar(tmp_path, redis_url, name="tls-rotated", tls=first)
    try:
        address = sidecar.grpc_address
        assert answers_health(address, grpc.ssl_channel_credentials(*_client(first.client)))
        assert not answers_health(address, grpc.ssl_channel_credentials(*_client(second.client)))
        # A rotation: the new CA's files written over the old ones (as a Secret swaps them).
        for new, old in zip(
            (second.server.cert, second.server.key, second.server.ca),
            (first.server.cert, first.server.key, first.server.ca),
            strict=True,
        ):
            assert new is not None and old is not None
            shutil.copyfile(new, old)
        rotated = grpc.ssl_channel_credentials(*_client(second.client))
        await wait_until(lambda: answers_health(address, rotated), what="the new certificate")
        assert not answers_health(address, grpc.ssl_channel_credentials(*_client(first.client)))
    finally:
        sidecar.process.stop()


async def test_the_kubernetes_envoy_speaks_mutual_tls_to_its_sidecar(tmp_path, redis_url):
    """deploy/kubernetes's Envoy config as shipped (file-based SDS for the pod's Secret)
    in front of a sidecar that asks every client for a certificate."""
    pki = make_local_pki(tmp_path / "pki")
    sidecar = start_sidecar(tmp_path, redis_url, "--decider", "admit-all", name="tls-k8s", tls=pki)
    try:
        with recording_upstream(tmp_path) as upstream:
            listen, admin = free_port(), free_port()
            port = int(sidecar.grpc_address.rsplit(":", 1)[1])
            config = envoy_config.adapt(
                envoy_config.load(kubernetes_envoy_here(tmp_path, pki)),
                listen=("127.0.0.1", listen),
                admin_port=admin,
                sidecar=("127.0.0.1", port),
                upstreams=[("127.0.0.1", upstream)],
            )
            envoy = start_envoy(config, tmp_path, admin, "envoy-k8s-tls", 1)
            try:
                decided = decision_count(sidecar.admin_url)
                async with aiohttp.ClientSession() as session:
                    status, _ = await chat_once(session, f"http://127.0.0.1:{listen}", "any")
                assert status == 200
                over_tls = decision_count(sidecar.admin_url, reach=decided + 1)
                assert over_tls == decided + 1
                assert len(recorded(upstream)) == 1
            finally:
                envoy.stop()
    finally:
        sidecar.process.stop()


async def test_a_reporter_takes_renewed_certificates(tmp_path, redis_url, aredis):
    """The CA and every certificate renewed in place (as cert-manager rotates Secrets),
    then the sidecar restarted with them: the reporter reconnects with its new files."""
    first, second = make_local_pki(tmp_path / "first"), make_local_pki(tmp_path / "second")
    mounted = LocalPki(first.ca, _mounted(first.server, tmp_path / "server"),
                       _mounted(first.client, tmp_path / "client"))  # fmt: skip
    port, engine_port = free_port(), free_port()
    environment = {REPORT_TOKEN_ENV: REPORT_TOKEN}
    engine = ManagedProcess("mock-tls", mock_vllm_argv(engine_port), tmp_path / "mock.log")
    engine.start_ready(lambda: readiness.http_ok(f"http://127.0.0.1:{engine_port}/health"))
    running = [engine]
    try:
        sidecar = start_sidecar(
            tmp_path, redis_url, name="tls-a", grpc_port=port, tls=mounted, env=environment
        )
        running.append(sidecar.process)
        reporter = ManagedProcess(
            "reporter-tls",
            [sys.executable, "-m", "sidecar", "report", "--vllm-url",
             f"http://127.0.0.1:{engine_port}", "--sidecar", f"127.0.0.1:{port}",
             "--interval", "0.1", *tls_client_args(mounted.client)],
            tmp_path / "reporter.log",
            environment,
        )  # fmt: skip
        reporter.start()
        running.append(reporter)
        await wait_until(lambda: readiness.pods_reporting(sidecar.admin_url) == 1, what="reports")
        _mounted(second.server, tmp_path / "server")
        _mounted(second.client, tmp_path / "client")
        sidecar.process.stop()
        await aredis.delete(REPORTS_KEY, STAMPS_KEY)  # only a report made after this counts
        again = start_sidecar(
            tmp_path, redis_url, name="tls-b", grpc_port=port, tls=mounted, env=environment
        )
        running.append(again.process)
        await wait_until(
            lambda: readiness.pods_reporting(again.admin_url) == 1, what="reports over new files"
        )
    finally:
        for process in reversed(running):
            process.stop()


def _mounted(files: TlsFiles, directory: Path) -> TlsFiles:
    """`files` copied where a Secret would be mounted (tls.crt, tls.key, ca.crt)."""
    directory.mkdir(exist_ok=True)
    for source, name in ((files.cert, "tls.crt"), (files.key, "tls.key"), (files.ca, "ca.crt")):
        assert source is not None
        shutil.copyfile(source, directory / name)
    return TlsFiles(directory / "tls.crt", directory / "tls.key", directory / "ca.crt")
