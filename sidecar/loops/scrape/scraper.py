"""Scrape mode: the sidecar holding a group's lease reads every pod of the group's targets
itself, every `interval`, and stores each pod's load report exactly as a pushed one
(`qos-sidecar report` beside the pod) would be: same store, same TTL, so push and scrape
mix. Another sidecar takes the group over within the lease time when its holder dies.

Each tick scrapes the group's pods concurrently, each with its own timeout; a pod that
fails is not reported and stops counting once its last report's TTL runs out. DNS names
are resolved again every `resolve_seconds`; a pod that leaves the name is no longer
scraped, and stops counting the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import aiohttp
import dns.exception
import redis.asyncio as redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.snapshot import Snapshot
from sidecar.generated.qos.v1 import load_report_pb2
from sidecar.loops import dialects
from sidecar.loops.dialects.report import load_report
from sidecar.loops.overload.reports import ReportStore
from sidecar.loops.scrape.resolver import Resolver
from sidecar.loops.scrape.targets import DEFAULT_GROUP, Target, endpoint
from sidecar.loops.slo.lease import Lease

log = logging.getLogger(__name__)

LEASE_KEY = "qos:{qos-scrape}:lease:"


@dataclass(frozen=True)
class ScrapeSettings:
    targets: tuple[Target, ...]
    interval: float = 0.2  # seconds between two scrapes of a pod
    timeout: float = 0.15  # a pod's answer, at most
    lease_seconds: float = 0.8  # under the reports' TTL: a takeover leaves none stale
    resolve_seconds: float = 5.0


@dataclass
class PodState:
    """What the last scrape of one pod said, for the metrics."""

    target: str
    ok: bool = False
    reason: str = ""  # why the last scrape failed
    errors: dict[str, int] = field(default_factory=dict)


class Scraper:
    def __init__(
        self,
        client: redis.Redis,
        reports: ReportStore,
        snapshot: Callable[[], Snapshot],
        settings: ScrapeSettings,
        me: str,
        resolver: Resolver | None = None,
    ) -> None:
        self._reports = reports
        self._snapshot = snapshot
        self.settings = settings
        self._resolver = resolver or Resolver()
        groups = sorted({t.group for t in settings.targets})
        self._leases = {g: Lease(client, me, LEASE_KEY + g) for g in groups}
        self.leading: dict[str, bool] = dict.fromkeys(groups, False)
        self.pods: dict[str, PodState] = {}  # by pod id, of the groups this sidecar scrapes
        self._resolved: dict[Target, tuple[float, list[str]]] = {}
        self._looking_up: dict[Target, asyncio.Task[None]] = {}
        self._background = Background()
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self.settings.targets:
            self._background.start(self._run(), "scraper")

    async def stop(self) -> None:
        await self._background.stop()
        for lookup in list(self._looking_up.values()):
            lookup.cancel()
        if self._http is not None:
            await self._http.close()

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout)
        self._http = aiohttp.ClientSession(timeout=timeout)
        while True:
            started = time.monotonic()
            try:
                await self.tick()
            except Exception:  # one bad tick must not end scraping
                log.exception("scrape tick failed")
            await asyncio.sleep(max(0.0, self.settings.interval - (time.monotonic() - started)))

    async def tick(self) -> None:
        """Renew or take each group's lease; scrape the groups this sidecar holds."""
        pods: list[tuple[str, str, str]] = []  # (pod id, /metrics URL, pool)
        pools = self._snapshot().pools
        for group, lease in self._leases.items():
            leading = await lease.hold(self.settings.lease_seconds)
            if leading != self.leading[group]:
                log.info("scrape lease %s: %s", "taken" if leading else "lost", group)
            self.leading[group] = leading
            if leading:
                for target in self.settings.targets:
                    if target.group == group:
                        # A group named after a model pool reports for it (as report
                        # --pool does); otherwise the pool is the one serving the model.
                        named = group != DEFAULT_GROUP and pools.get(group) is not None
                        pool = group if named else ""
                        pods += [(*pod, pool) for pod in self._pods_of(target)]
        ids = {pod_id for pod_id, _, _ in pods}
        for gone in set(self.pods) - ids:  # left the name, or the group's lease
            del self.pods[gone]
        scraped = await asyncio.gather(*(self._scrape(*pod) for pod in pods))
        reports = [report for report in scraped if report is not None]
        ttl = self._snapshot().config.overload.report_ttl_seconds
        try:
            await self._reports.put_many(reports, ttl)  # one call for them all
        except redis.RedisError:
            redis_errors.note("load_reports")
            for report in reports:
                self._failed(self.pods[report.pod_id], "redis")
            return
        for report in reports:
            state = self.pods[report.pod_id]
            state.ok, state.reason = True, ""

    def _pods_of(self, target: Target) -> list[tuple[str, str]]:
        addresses = self._addresses(target) if target.dns else [target.host]
        return [
            (pod_id, f"http://{pod_id}/metrics")
            for pod_id in (endpoint(address, target.port) for address in addresses)
        ]

    def _addresses(self, target: Target) -> list[str]:
        """The name's addresses as last looked up; a new lookup is started, in the
        background, every resolve_seconds. A slow or silent DNS server never holds a
        scrape round up (the reports of every pod would go stale meanwhile): the round
        goes on with the last answer."""
        at, addresses = self._resolved.get(target, (float("-inf"), []))
        due = time.monotonic() - at >= self.settings.resolve_seconds
        if due and target not in self._looking_up:
            self._looking_up[target] = asyncio.create_task(self._look_up(target))
        return addresses

    async def _look_up(self, target: Target) -> None:
        """Look the name up; on no answer, keep the last addresses until the next try."""
        _, addresses = self._resolved.get(target, (float("-inf"), []))
        try:
            addresses = await self._resolver.addresses(target.host)
        except dns.exception.DNSException as error:
            log.warning("cannot resolve %s: %s", target.host, error)
        finally:
            self._resolved[target] = (time.monotonic(), addresses)
            self._looking_up.pop(target, None)

    async def _scrape(self, pod_id: str, url: str, pool: str) -> load_report_pb2.LoadReport | None:
        """The pod's report, or None (and why, in its state) when it gave none."""
        state = self.pods.setdefault(pod_id, PodState(pod_id))
        assert self._http is not None
        try:
            async with self._http.get(url) as response:
                response.raise_for_status()
                text = await response.text()
            report = load_report(text, pod_id)
            report.pool = pool
            return report
        except TimeoutError:
            self._failed(state, "timeout")
        except aiohttp.ClientResponseError as error:
            self._failed(state, f"http_{error.status}")
        except aiohttp.ClientError:
            self._failed(state, "unreachable")
        except dialects.MetricsUnreadable:
            self._failed(state, "unreadable")
        return None

    @staticmethod
    def _failed(state: PodState, reason: str) -> None:
        if state.ok or state.reason != reason:
            log.warning("scraping %s: %s", state.target, reason)
        state.ok, state.reason = False, reason
        state.errors[reason] = state.errors.get(reason, 0) + 1


class ScrapeCollector(Collector):
    def __init__(self, scraper: Scraper) -> None:
        self._scraper = scraper

    def collect(self) -> Iterator[Metric]:
        leader = GaugeMetricFamily(
            "qos_scrape_leader",
            "1 while this sidecar holds the group's scrape lease and scrapes its targets.",
            labels=["group"],
        )
        for group, leading in sorted(self._scraper.leading.items()):
            leader.add_metric([group], 1 if leading else 0)
        up = GaugeMetricFamily(
            "qos_scrape_target_up",
            "1 when the pod's last scrape gave a report; 0 with the reason it failed.",
            labels=["pod", "reason"],
        )
        errors = CounterMetricFamily(
            "qos_scrape_errors",
            "Failed scrapes of each pod this sidecar scrapes, by reason.",
            labels=["pod", "reason"],
        )
        for pod_id, state in sorted(self._scraper.pods.items()):
            up.add_metric([pod_id, state.reason], 1 if state.ok else 0)
            for reason, count in sorted(state.errors.items()):
                errors.add_metric([pod_id, reason], count)
        yield from (leader, up, errors)
