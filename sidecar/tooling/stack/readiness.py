"""Readiness checks: each answers True once a component serves, False until then."""

from __future__ import annotations

import urllib.error
import urllib.request

import grpc
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sidecar.grpc_tls import TlsFiles, channel_credentials


def http_ok(url: str, expect_body: bytes | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200 and (
                expect_body is None or expect_body in response.read()
            )
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def envoy_ready(admin_url: str) -> bool:
    # /ready answers LIVE once the listeners are initialised.
    return http_ok(f"{admin_url}/ready", b"LIVE")


def grpc_serving(address: str, service: str = "", tls: TlsFiles | None = None) -> bool:
    """gRPC health says SERVING; over TLS with these client files when given."""
    channel = (
        grpc.secure_channel(address, channel_credentials(tls))
        if tls is not None
        else grpc.insecure_channel(address)
    )
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=1
            )
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def redis_ping(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def pods_reporting(sidecar_admin_url: str) -> int:
    """How many pods the sidecar has fresh load reports from (its qos_pods_reporting; the
    fewest any of its worker processes has, for serve --processes)."""
    try:
        with urllib.request.urlopen(f"{sidecar_admin_url}/metrics", timeout=1) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0
    counts = [
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith(("qos_pods_reporting ", "qos_pods_reporting{"))
    ]
    return min(counts, default=0)
