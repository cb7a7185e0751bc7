"""`qos-sidecar serve`: the ext_proc gRPC server, gRPC health, and the admin HTTP server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import grpc
import redis.asyncio as redis
from aiohttp import web
from envoy.service.accesslog.v3 import als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from envoy.service.runtime.v3 import rtds_pb2_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sidecar import event_loop, grpc_tls, logs, redis_connect, shutdown
from sidecar.admin import admin_app
from sidecar.config import envoy_layer, local_copy
from sidecar.config.audit import Actor
from sidecar.config.disk_writer import LatestOnDisk
from sidecar.config.file_watch import FileWatch
from sidecar.config.operator_state import OperatorMode
from sidecar.config.runtime_layer import RuntimeLayerService
from sidecar.config.snapshot import Snapshot
from sidecar.config.state_dir import StateDir
from sidecar.config.store import ConfigStore
from sidecar.config.watcher import ConfigWatcher, Source
from sidecar.deciders import build_decider
from sidecar.envoy_auth import EnvoyCredential, EnvoyOnly
from sidecar.generated.qos.v1 import load_report_pb2_grpc
from sidecar.grpc_tls import TlsFiles
from sidecar.loops.fairness.watch import FairnessCollector, FairnessWatch
from sidecar.loops.overload.admission_records import AdmissionRecords
from sidecar.loops.overload.metrics import LoadCollector
from sidecar.loops.overload.monitor import LoadMonitor
from sidecar.loops.overload.reports import ReportStore
from sidecar.loops.overload.served import ServedCapacity
from sidecar.loops.overload.servicer import LoadReporterService
from sidecar.loops.scrape.resolver import Resolver
from sidecar.loops.scrape.scraper import ScrapeCollector, Scraper, ScrapeSettings
from sidecar.loops.scrape.targets import TargetsInvalid, parse_targets
from sidecar.loops.slo.control import Adjustment
from sidecar.loops.slo.controller import SloController
from sidecar.loops.slo.lease import Lease
from sidecar.loops.slo.metrics import SloCollector
from sidecar.loops.slo.samples import SampleRecorder, SampleStore
from sidecar.metrics import BucketLevelCollector, SidecarMetrics
from sidecar.operator.dashboard.api import add_routes as add_dashboard_routes
from sidecar.operator.gateway_view import GatewayView
from sidecar.operator.history.recorder import HistoryRecorder
from sidecar.operator.history.store import HistoryStore
from sidecar.redis_errors import RedisErrorCollector
from sidecar.request.admission.refunds import Refunds
from sidecar.request.completion.access_log import AccessLogReceiver
from sidecar.request.completion.exchange_ends import ExchangeEnds
from sidecar.request.eviction.evictions import Evictions
from sidecar.request.extproc import tracing
from sidecar.request.extproc.decision_telemetry import DecisionLog
from sidecar.request.extproc.servicer import ExternalProcessor
from sidecar.request.limiter.headroom import Headroom
from sidecar.request.limiter.overlimit import OverLimitCache
from sidecar.request.limiter.redis_buckets import RedisTokenBuckets
from sidecar.request.limiter.resilient import DegradedCollector, ResilientLimiter
from sidecar.request.queueing.metrics import QueueCollector
from sidecar.request.queueing.peers import PeerRegistry
from sidecar.request.queueing.queue import AdmissionQueue
from sidecar.request.queueing.slots import SlotTable
from sidecar.settings import SidecarSettings
from sidecar.workers import supervisor
from sidecar.workers.siblings import Siblings
from sidecar.workers.worker import Worker

Settings = SidecarSettings

log = logging.getLogger(__name__)

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LOAD_REPORTER_SERVICE = "qos.v1.LoadReporter"

_GRPC_OPTIONS = [
    # Envoy keeps one HTTP/2 connection with many streams; let it ping idle connections.
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    # A body message is the buffered body plus a few bytes of framing: gRPC's default 4 MiB
    # cap refused the largest body envoy.yaml buffers (4 MiB), and Envoy then failed open,
    # past QoS. Well above any per_connection_buffer_limit_bytes a deployment would set.
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


def _grpc_options(worker: bool) -> list[tuple[str, int]]:
    # The workers of `serve --processes N` share one port (the kernel spreads connections
    # over them; envoy.yaml has Envoy open one a few streams). A sidecar on its own
    # refuses to start on a port another process holds, instead of sharing it silently.
    return [("grpc.so_reuseport", 1 if worker else 0), *_GRPC_OPTIONS]


class Part(Protocol):
    """A part of the sidecar that runs in the background between start and stop."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class SidecarServer:
    def __init__(self, settings: SidecarSettings) -> None:
        self.settings = settings
        self.metrics = SidecarMetrics()
        # One of `serve --processes N`'s workers, or None: a sidecar on its own.
        self.worker = Worker.from_env()
        # TLS where the port reaches beyond this machine (grpc_tls.py); ext_proc, the
        # access log and the runtime layer Envoy's alone (envoy_auth.py).
        self._tls, envoy = guarded_port(settings)
        envoy_only = EnvoyOnly(
            envoy, lambda service, reason: self.metrics.grpc_refused.labels(service, reason).inc()
        )
        self._grpc = grpc.aio.server(
            options=_grpc_options(self.worker is not None), interceptors=[envoy_only]
        )
        self._health = health.aio.HealthServicer()
        self._admin: web.AppRunner | None = None
        self._ready = False
        self._tracer = tracing.from_environment()  # off unless OTEL_EXPORTER_OTLP_* says
        # Every Redis call is bounded: a slow Redis must not hold requests for long.
        self.redis = self._connect()
        # The admission records are read from every tier's slot, so from every master of
        # a cluster: on a client of their own, whose reconnections to a master that went
        # away never hold up the decisions' budget calls on this one.
        self._records_redis = self._connect()
        # A put back is recorded as this sidecar's: its host (a pod's name) and process.
        putter = Actor(f"sidecar {socket.gethostname()} pid {os.getpid()}", "sidecar")
        self.state = StateDir.resolve(settings.state_dir)
        self.state.make()
        # A drain's mark left by an earlier life of this pod's containers is not this one's.
        with contextlib.suppress(OSError):
            self.state.envoy_drained.unlink(missing_ok=True)
        copy_path = self.state.configuration_copy(settings.redis_url)
        self.watcher = ConfigWatcher(self.redis, actor=putter, initial=_last_known(copy_path))
        for source in Source.ALL:
            self.metrics.config_source.labels(source).set_function(self._held_from(source))
        # What it holds, on its own disk on every change (config/local_copy.py)...
        where = redis_connect.redacted(settings.redis_url)
        self._copy: LatestOnDisk[Snapshot] = LatestOnDisk(
            lambda snapshot: local_copy.write(copy_path, snapshot, where),
            f"the configuration's copy {copy_path}",
        )
        self.watcher.on_change(self._keep_copy)
        self.watcher.on_put_back(self._keep_copy)  # the checksum as put back
        self.metrics.config_copy_version.set_function(
            lambda: float(self._copy.written.version if self._copy.written else 0)
        )
        # ...and the mode, where Envoy reads it without this sidecar (config/envoy_layer.py).
        self._envoy_layer: LatestOnDisk[OperatorMode] = LatestOnDisk(
            lambda mode: envoy_layer.write(self.state, mode),
            f"Envoy's runtime layer {self.state.envoy_link}",
        )
        self.watcher.on_change(lambda snapshot: self._envoy_layer.submit(snapshot.mode))
        for what, writer in (("copy", self._copy), ("envoy_layer", self._envoy_layer)):
            self.metrics.state_write_failures.labels(what).set_function(writer.failure_count)
        self.config_store = ConfigStore(self.redis)
        self.files = FileWatch(
            self.watcher,
            self.config_store,
            Path(settings.config_file) if settings.config_file else None,
            Path(settings.tenants_file) if settings.tenants_file else None,
            max_revoked_share=settings.tenants_file_max_revoked_share,
        )
        for path in self.files.files:
            self.metrics.config_file_refused.labels(str(path)).set_function(
                self.files.refusal_of(path)
            )
        # None given: one nobody is told, so the dashboard stays closed.
        self.admin_token = settings.admin_token or secrets.token_urlsafe(24)
        self.watcher.on_change(lambda snapshot: self.metrics.config_version.set(snapshot.version))
        self.watcher.on_put_back(lambda _snapshot: self.metrics.config_put_back.inc())
        # The mode, for Envoy to keep should this sidecar be gone (config/runtime_layer.py).
        self._runtime_layer = RuntimeLayerService(lambda: self.watcher.current.mode)
        self.watcher.on_change(lambda _snapshot: self._runtime_layer.changed())
        self.metrics.config_invalid.set_function(lambda: float(self.watcher.problem is not None))
        reports = ReportStore(self.redis)
        sidecar_id = self.worker.owner if self.worker else secrets.token_hex(4)
        self.queue = AdmissionQueue(
            lambda: self.watcher.current.config,
            SlotTable(owner=sidecar_id),
            PeerRegistry(self.redis, sidecar_id),
        )
        # What the engines serve while they fall behind, measured at exchange ends.
        self.served = ServedCapacity(self.queue.local_share, self.queue.cluster_in_flight_in)
        self.monitor = LoadMonitor(
            reports,
            self.watcher.snapshot,
            gateway_in_flight=self.queue.cluster_in_flight_in,
            pace=self.queue.pace,
            served=self.served,
            records=AdmissionRecords(self._records_redis, lambda: self.watcher.current.pools.names),
        )
        self.watcher.on_change(lambda _snapshot: self.monitor.reevaluate())
        # The streams this sidecar may end early, ended when the monitor asks.
        self.evictions = Evictions(
            self.watcher.snapshot, self.monitor.shedding, self.queue.local_share, self.metrics
        )
        self.monitor.evict = self.evictions.evict
        self.metrics.registry.register(LoadCollector(self.monitor))
        self.metrics.registry.register(QueueCollector(self.queue))
        self._load_reporter = LoadReporterService(
            reports,
            self.watcher.snapshot,
            settings.report_token,
            lambda reason: self.metrics.reports_refused.labels(reason).inc(),
        )
        # The decisions' budget calls share one connection of their own (a single server).
        self._budget_redis = (
            redis_connect.budget_client(
                settings.redis_url, settings.redis_cluster, settings.redis_socket_timeout
            )
            if settings.shared_budget_connection
            else None
        )
        self.limiter = ResilientLimiter(
            RedisTokenBuckets(self.redis, self._budget_redis),
            self.redis,
            self.queue.sidecars_alive,
            timeout=settings.redis_timeout_ms / 1000,
        )
        self.headroom = (
            Headroom(
                self.limiter,
                self.queue.sidecars_alive,
                settings.charge_behind_ms / 1000,
            )
            if settings.charge_behind_ms > 0
            else None
        )
        budgets = self.headroom or self.limiter
        self.overlimit = OverLimitCache(budgets) if settings.over_limit_cache else None
        self.metrics.registry.register(
            DegradedCollector(self.limiter, self.overlimit, self.headroom)
        )
        samples = SampleStore(self.redis)
        self.samples = SampleRecorder(samples, lambda: self.watcher.current.config)
        self.controller = SloController(
            samples,
            ConfigStore(self.redis),
            Lease(self.redis, sidecar_id),
            self.watcher.snapshot,
            on_adjust=lambda step: self.metrics.adjustments.labels(_direction(step)).inc(),
        )
        self.metrics.registry.register(SloCollector(self.controller, self.watcher.snapshot))
        self.metrics.registry.register(RedisErrorCollector())
        self.scraper = Scraper(
            self.redis,
            reports,
            self.watcher.snapshot,
            scrape_settings(settings),
            sidecar_id,
            Resolver(settings.scrape_dns_server),
        )
        self.metrics.registry.register(ScrapeCollector(self.scraper))
        self.view = GatewayView(
            self.watcher,
            self.config_store,
            self.metrics.decisions,
            self.monitor,
            self.queue,
            self.controller,
            self.metrics.overflowed,
        )
        self.history = HistoryRecorder(HistoryStore(self._records_redis), self.view)
        self.fairness = FairnessWatch(self._records_redis, self.watcher.snapshot)
        self.metrics.registry.register(FairnessCollector(self.fairness, self.watcher.snapshot))
        # Budget given back: by admission (a request shed after it took its budget) and
        # by the exchange ends (what an answer did not use, or owes).
        self.refunds = Refunds(self.overlimit or budgets)
        self.metrics.registry.register(BucketLevelCollector(self.refunds.levels))
        self.decider = build_decider(
            settings,
            self.redis,
            self.watcher,
            self.overlimit or budgets,
            self.refunds,
            self.monitor,
            self.queue,
        )
        self.ends = ExchangeEnds(
            self.queue,
            self.metrics,
            self.samples,
            self.watcher.snapshot,
            self.refunds.give_back,
            self.history.first_token,
            self.served.served,
        )
        self._access_log = AccessLogReceiver(self.ends.ended)
        # A worker's access-log stream carries its siblings' exchanges too.
        self._siblings = Siblings(self.worker, self.ends.ended) if self.worker else None
        if self._siblings is not None:
            self.ends.forward = self._siblings.forward
        # Started in this order, stopped in the reverse one.
        self._parts: list[Part] = [
            self._copy,
            self._envoy_layer,
            self.watcher,
            self.files,
            self.monitor,
            self.queue,
            self.limiter,
            *([self.headroom] if self.headroom is not None else []),
            self.samples,
            self.controller,
            self.fairness,
            self.scraper,
            self.history,
            *([self._siblings] if self._siblings is not None else []),
        ]

    def _held_from(self, source: str) -> Callable[[], float]:
        return lambda: float(self.watcher.source == source)

    def _keep_copy(self, snapshot: Snapshot) -> None:
        if snapshot.version > 0 and snapshot.store_id:  # a store's, not SAFE or a stand-in
            self._copy.submit(snapshot)

    def _connect(self) -> redis.Redis:
        return redis_connect.connect(
            self.settings.redis_url,
            self.settings.redis_cluster,
            # Every Redis call is bounded: a slow Redis must not hold requests for long.
            socket_timeout=self.settings.redis_socket_timeout,
            socket_connect_timeout=self.settings.redis_socket_timeout,
        )

    async def start(self) -> None:
        for part in self._parts:
            await part.start()
        load_report_pb2_grpc.add_LoadReporterServicer_to_server(self._load_reporter, self._grpc)
        als_pb2_grpc.add_AccessLogServiceServicer_to_server(self._access_log, self._grpc)
        rtds_pb2_grpc.add_RuntimeDiscoveryServiceServicer_to_server(self._runtime_layer, self._grpc)
        ext_proc_grpc.add_ExternalProcessorServicer_to_server(
            ExternalProcessor(
                self.decider,
                self.metrics,
                self.ends.stream_ended,
                self.ends.first_byte,
                DecisionLog(self.settings.decision_log_sample),
                self._tracer,
                self.evictions,
            ),
            self._grpc,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._grpc)
        if self._tls is None:
            self._grpc.add_insecure_port(self.settings.grpc_address)
        else:
            credentials = grpc_tls.server_credentials(self._tls)
            self._grpc.add_secure_port(self.settings.grpc_address, credentials)
        await self._grpc.start()
        app = admin_app(self.metrics, self._not_ready, self._notes)
        add_dashboard_routes(
            app, self.view, self.history, self.admin_token, self.worker is not None
        )
        self._admin = web.AppRunner(app)
        await self._admin.setup()
        await web.TCPSite(self._admin, self.settings.admin_host, self.settings.admin_port).start()
        for service in ("", EXT_PROC_SERVICE, LOAD_REPORTER_SERVICE):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self._ready = True
        if self.worker is None:  # a worker's supervisor says it once for all
            for closed in self.settings.closed():
                log.warning(closed)
        log.info(
            "sidecar serving",
            extra={
                "grpc": self.settings.grpc_address,
                "admin": f"{self.settings.admin_host}:{self.settings.admin_port}",
                "decider": self.settings.decider,
            },
        )

    def _notes(self) -> list[str]:
        """What /readyz says beside "ready": Redis away while the copy on disk serves,
        files refused while the last good serves."""
        without_redis = self.watcher.serving_without_redis
        refused = [
            f"refused, the last good configuration serves: {why}"
            for why in self.files.refused.values()
        ]
        return [without_redis, *refused] if without_redis else refused

    def _not_ready(self) -> str | None:
        """Why /readyz answers 503, or None when the sidecar is ready."""
        if not self._ready:
            return "draining"
        return self.watcher.not_ready_because

    async def stop(self, now: asyncio.Event | None = None) -> None:
        """Pace: report NOT_SERVING, refuse new streams, let open ones finish within the
        grace (or until `now` is set: a second signal); then stop the rest, each step
        bounded, so that nothing Redis or a peer does holds the exit."""
        self._ready = False
        await self._health.enter_graceful_shutdown()
        log.info("draining", extra={"grace_seconds": self.settings.drain_seconds})
        self._runtime_layer.close()  # Envoy's subscription would hold the drain
        draining = asyncio.ensure_future(self._grpc.stop(self.settings.drain_seconds))
        hurried = asyncio.ensure_future((now or asyncio.Event()).wait())
        await asyncio.wait((draining, hurried), return_when=asyncio.FIRST_COMPLETED)
        hurried.cancel()
        if not draining.done():
            log.warning("told again to stop: open streams cut")
            await self._grpc.stop(0)
        steps = [self._admin.cleanup()] if self._admin is not None else []
        steps += [part.stop() for part in reversed(self._parts)]
        steps += [self.redis.aclose(), self._records_redis.aclose()]
        steps += [self._budget_redis.aclose()] if self._budget_redis is not None else []
        # The spans batched so far are sent (bounded: an exporter may block on its peer).
        steps.append(asyncio.to_thread(self._tracer.shutdown))
        for step in steps:
            await shutdown.bounded(step)
        log.info("sidecar stopped")


def _last_known(path: Path) -> Snapshot | None:
    """The copy on disk, or None (none, or refused: said, and SAFE is held instead)."""
    try:
        held = local_copy.read(path)
    except local_copy.CopyRefused as error:
        log.error("the configuration's copy on disk is refused, not used: %s", error)
        return None
    if held is not None:
        log.info(
            "last known good configuration read from disk",
            extra={"version": held.version, "store": held.store_id, "file": str(path)},
        )
    return held


def guarded_port(settings: SidecarSettings) -> tuple[TlsFiles | None, EnvoyCredential]:
    """The gRPC port's TLS files and Envoy's credential; a port other machines reach
    without TLS (unless said private), or without Envoy's token, is refused here."""
    tls = settings.grpc_tls
    grpc_tls.check_listener(settings.grpc_host, tls, settings.grpc_plaintext)
    envoy = EnvoyCredential.for_listener(
        settings.envoy_token,
        settings.grpc_host,
        settings.envoy_client_name,
        client_ca=tls is not None and tls.ca is not None,
    )
    return tls, envoy


def scrape_settings(settings: SidecarSettings) -> ScrapeSettings:
    try:
        targets = parse_targets(settings.scrape_targets)
    except TargetsInvalid as error:
        raise SystemExit(f"--scrape-targets: {error}") from None
    return ScrapeSettings(
        targets,
        interval=settings.scrape_interval,
        timeout=settings.scrape_timeout,
        lease_seconds=settings.scrape_lease_seconds,
        resolve_seconds=settings.scrape_resolve_seconds,
    )


def _direction(step: Adjustment) -> str:
    return "to_p0" if "back to P0" in step.reason else "from_p0"


async def serve(settings: SidecarSettings) -> None:
    server = SidecarServer(settings)
    stop, now = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    # The first SIGTERM or SIGINT drains; another one cuts the drain short.
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: now.set() if stop.is_set() else stop.set())
    await server.start()
    await stop.wait()
    watchdog = shutdown.exit_after(settings.drain_seconds + shutdown.EXIT_SECONDS)
    try:
        await server.stop(now)
    finally:
        watchdog.cancel()


def main(settings: SidecarSettings) -> int:
    logs.configure(settings.log_level, "sidecar")
    if settings.processes < 1:
        raise SystemExit("--processes: at least 1")
    guarded_port(settings)  # refused before any worker starts (each would, and restart)
    if settings.processes > 1:
        supervisor.run(settings)  # each worker runs this again, with --processes 1
        return 0
    event_loop.run(serve(settings), settings.event_loop)
    return 0
