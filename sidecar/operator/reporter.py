"""`qos-sidecar report`: scrapes one model server's /metrics and pushes its load to the
sidecars (vLLM, SGLang, trtllm-serve, Triton's TensorRT-LLM backend, TGI: sidecar/loops/dialects/).

It runs beside a model-server pod, so pods need no Redis credentials. It never exits on
a failure: while the server restarts it reports nothing (the pod goes stale and stops counting),
while the sidecar is unreachable it keeps scraping and retries on the next tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import grpc

from sidecar import logs
from sidecar.generated.qos.v1 import load_report_pb2_grpc
from sidecar.grpc_tls import TlsFiles, channel_credentials
from sidecar.loops import dialects
from sidecar.loops.dialects.report import load_report
from sidecar.loops.overload import report_auth
from sidecar.options import secret, setting

log = logging.getLogger(__name__)

POLICIES = ("", "fcfs", "priority")  # "": unknown


@dataclass(frozen=True)
class Settings:
    vllm_url: str = setting(
        "http://127.0.0.1:8000",
        "QOS_VLLM_URL",
        "the model server to watch (vLLM, or another one: --dialect)",
    )
    sidecar: str = setting("127.0.0.1:50051", "QOS_SIDECAR_ADDRESS", "sidecar gRPC address")
    report_token: str = secret(
        "QOS_REPORT_TOKEN", "the token the sidecars ask of every report (their QOS_REPORT_TOKEN)"
    )
    pod_id: str = setting("", "POD_NAME", "this pod's id (default: host name and vLLM port)")
    interval: float = setting(0.2, "QOS_REPORT_INTERVAL", "seconds between reports")
    pool: str = setting(
        "",
        "QOS_POOL",
        "the model pool this pod serves (default: the pool whose models include the "
        "model_name vLLM's metrics carry)",
    )
    capacity_tokens_per_second: float = setting(
        0.0,
        "QOS_CAPACITY_TOKENS_PER_SECOND",
        "input tokens a second this pod prefills (its pool's budgets follow the sum over "
        "fresh pods); 0: not said, the pool's configured capacity holds",
    )
    scheduling_policy: str = setting(
        "",
        "QOS_VLLM_SCHEDULING_POLICY",
        "the --scheduling-policy vLLM runs with (fcfs or priority), passed on in each report "
        "so the sidecar can warn when engine.send_priority meets fcfs; empty: unknown",
    )
    dialect: str = setting(
        "",
        "QOS_METRICS_DIALECT",
        "whose /metrics the server speaks: vllm, sglang, trtllm (trtllm-serve), triton "
        "(Triton's TensorRT-LLM backend), tgi or llamacpp (llama.cpp's llama-server); "
        "empty: found from the metrics themselves",
    )
    tls_ca_file: str = setting(
        "",
        "QOS_TLS_CA_FILE",
        "speak TLS to the sidecar, whose certificate comes from this CA (PEM); read again "
        "when it changes",
    )
    tls_cert_file: str = setting(
        "", "QOS_TLS_CERT_FILE", "mutual TLS: this reporter's certificate chain (PEM)"
    )
    tls_key_file: str = setting("", "QOS_TLS_KEY_FILE", "the key of --tls-cert-file (PEM)")
    log_level: str = setting("INFO", "QOS_LOG_LEVEL", "log level")

    @property
    def tls(self) -> TlsFiles | None:
        return TlsFiles.given(
            self.tls_cert_file,
            self.tls_key_file,
            self.tls_ca_file,
            "--tls-ca-file/--tls-cert-file/--tls-key-file",
        )

    def __post_init__(self) -> None:
        if self.dialect and self.dialect not in dialects.DIALECTS:
            known = ", ".join(dialects.DIALECTS)
            raise SystemExit(f"--dialect {self.dialect!r}: one of {known}, or empty")
        if self.scheduling_policy not in POLICIES:
            raise SystemExit(
                f"--scheduling-policy {self.scheduling_policy!r}: fcfs, priority or empty"
            )
        if self.capacity_tokens_per_second < 0:
            raise SystemExit("--capacity-tokens-per-second must not be negative")

    def resolved_pod_id(self) -> str:
        if self.pod_id:
            return self.pod_id
        port = urlsplit(self.vllm_url).port or 80
        return f"{socket.gethostname()}:{port}"


class Reporter:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pod_id = settings.resolved_pod_id()
        self._failing: str | None = None  # what is failing now, so each outage logs once

    async def run(self, stop: asyncio.Event) -> None:
        timeout = aiohttp.ClientTimeout(total=max(1.0, self.settings.interval * 4))
        tls = self.settings.tls
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while not stop.is_set():  # once, and again whenever the certificates change
                seen = _signature(tls)
                async with self._channel(tls) as channel:
                    stub = load_report_pb2_grpc.LoadReporterStub(channel)
                    while not stop.is_set() and _signature(tls) == seen:
                        started = time.monotonic()
                        await self.tick(http, stub)
                        wait = self.settings.interval - (time.monotonic() - started)
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), timeout=max(wait, 0.0))

    def _channel(self, tls: TlsFiles | None) -> grpc.aio.Channel:
        if tls is None:
            return grpc.aio.insecure_channel(self.settings.sidecar)
        return grpc.aio.secure_channel(self.settings.sidecar, channel_credentials(tls))

    async def tick(self, http: aiohttp.ClientSession, stub) -> None:
        try:
            async with http.get(f"{self.settings.vllm_url}/metrics") as response:
                response.raise_for_status()
                text = await response.text()
            report = load_report(
                text, self.pod_id, self.settings.scheduling_policy, self.settings.dialect
            )
            report.pool = self.settings.pool
            report.capacity_tokens_per_second = self.settings.capacity_tokens_per_second
        except (aiohttp.ClientError, TimeoutError, dialects.MetricsUnreadable) as error:
            self._trouble("vllm", f"cannot read {self.settings.vllm_url}/metrics: {error}")
            return
        try:
            await stub.Report(
                report,
                timeout=max(1.0, self.settings.interval * 4),
                metadata=report_auth.credentials(self.settings.report_token),
            )
        except grpc.aio.AioRpcError as error:
            self._trouble("sidecar", f"sidecar {self.settings.sidecar}: {error.code().name}")
            return
        if self._failing is not None:
            log.info("reporting again", extra={"pod": self.pod_id, "after": self._failing})
            self._failing = None

    def _trouble(self, what: str, message: str) -> None:
        if self._failing != what:
            log.warning(message, extra={"pod": self.pod_id})
            self._failing = what


def _signature(tls: TlsFiles | None) -> tuple[tuple[int, int, int], ...]:
    if tls is None:
        return ()
    try:
        return tls.signature()
    except OSError:  # a file missing half-way through its rotation: as it was
        return ()


def main(settings: Settings) -> int:
    logs.configure(settings.log_level, "reporter")

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        reporter = Reporter(settings)
        log.info(
            "reporting",
            extra={"pod": reporter.pod_id, "vllm": settings.vllm_url, "sidecar": settings.sidecar},
        )
        await reporter.run(stop)

    asyncio.run(go())
    return 0
