"""Keeps the cluster load and the overload shedding state current, in the background.

Every `interval` (100 ms) it reads the fresh pod reports from Redis in one round trip,
aggregates them and updates the shedding state; requests only read that state. If Redis
cannot be read, the last view is kept until it is older than the reports' TTL, then the
load counts as unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator

import redis.asyncio as redis
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.schema import Tier
from sidecar.config.store import Snapshot
from sidecar.overload.load import aggregate
from sidecar.overload.priority_check import priority_unconfirmed
from sidecar.overload.reports import ReportStore
from sidecar.overload.shedding import SheddingState

log = logging.getLogger(__name__)


class LoadMonitor:
    def __init__(
        self,
        store: ReportStore,
        snapshot: Callable[[], Snapshot],
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        gateway_in_flight: Callable[[], int] = lambda: 0,
    ) -> None:
        self._store = store
        self._gateway_in_flight = gateway_in_flight
        self._snapshot = snapshot
        self._interval = interval
        self._clock = clock
        self.state = SheddingState()
        # Pods that may ignore the priority the sidecar sends, by what they report.
        self.priority_unconfirmed: dict[str, list[str]] = {}
        self._read_at = clock()
        self._background = Background()

    async def start(self) -> None:
        with contextlib.suppress(redis.RedisError):
            await self.refresh()
        self._background.start(self._run(), "load-monitor")

    async def stop(self) -> None:
        await self._background.stop()

    async def refresh(self) -> None:
        config = self._snapshot().config
        try:
            pods = await self._store.fresh()
        except redis.RedisError:
            if self._clock() - self._read_at < config.overload.report_ttl_seconds:
                raise
            pods = []  # the last view is as stale as a missing report
        else:
            self._read_at = self._clock()
        before = dict(self.state.shedding)
        self.state.update(aggregate(pods), config, self._gateway_in_flight())
        self._check_priority(config.engine.send_priority)
        if self.state.shedding != before:
            log.info(
                "overload shedding changed",
                extra={
                    "shedding": {
                        t.value: (r.value if r else None) for t, r in self.state.shedding.items()
                    },
                    "free_kv_ratio": self.state.load.free_kv_ratio,
                    "in_flight": self.state.load.in_flight,
                    "pods": len(self.state.load.pods),
                },
            )

    def _check_priority(self, send_priority: bool) -> None:
        unconfirmed = priority_unconfirmed(self.state.load.pods, send_priority)
        if unconfirmed == self.priority_unconfirmed:
            return
        self.priority_unconfirmed = unconfirmed
        if unconfirmed:
            log.warning(
                "engine.send_priority is on, but these pods do not report priority "
                "scheduling: vLLM under fcfs ignores the tiers' priority. Start vLLM with "
                "--scheduling-policy priority and its reporter with the same flag.",
                extra={"pods_by_policy": unconfirmed},
            )

    def reevaluate(self) -> None:
        """Apply a new configuration to the load last read, without waiting for the next
        read (thresholds and limits changed)."""
        config = self._snapshot().config
        self.state.update(self.state.load, config, self._gateway_in_flight())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.refresh()
            except redis.RedisError as error:
                redis_errors.note("load_reports")
                log.debug("pod reports not read: %s", error)


class LoadCollector(Collector):
    """Exposes the monitor's view at scrape time (per-pod series come and go with pods)."""

    def __init__(self, monitor: LoadMonitor) -> None:
        self._monitor = monitor

    def collect(self) -> Iterator[Metric]:
        state = self._monitor.state
        load = state.load
        yield GaugeMetricFamily(
            "qos_pods_reporting", "Pods with a fresh load report.", value=len(load.pods)
        )
        yield GaugeMetricFamily(
            "qos_load_unknown",
            "1 when no pod has a fresh load report.",
            value=0 if load.known else 1,
        )
        if load.free_kv_ratio is not None:
            yield GaugeMetricFamily(
                "qos_cluster_free_kv_ratio",
                "Capacity-weighted free KV-cache ratio of reporting pods.",
                value=load.free_kv_ratio,
            )
        yield GaugeMetricFamily(
            "qos_cluster_requests_in_flight",
            "Requests running or waiting in the reporting pods' engines.",
            value=load.in_flight,
        )
        age = GaugeMetricFamily(
            "qos_pod_report_age_seconds", "Age of each pod's latest load report.", labels=["pod"]
        )
        usage = GaugeMetricFamily(
            "qos_pod_kv_cache_usage_ratio", "KV-cache usage each pod reported.", labels=["pod"]
        )
        for pod in load.pods:
            age.add_metric([pod.pod_id], pod.age_seconds)
            usage.add_metric([pod.pod_id], pod.kv_cache_usage)
        yield age
        yield usage
        unconfirmed = GaugeMetricFamily(
            "qos_engine_priority_unconfirmed_pods",
            "With engine.send_priority on: fresh pods not reporting priority scheduling, "
            "by the policy they report (fcfs ignores the priority; unknown: not said).",
            labels=["policy"],
        )
        pods_by_policy = self._monitor.priority_unconfirmed
        for policy in ("fcfs", "unknown"):
            unconfirmed.add_metric([policy], len(pods_by_policy.get(policy, ())))
        yield unconfirmed
        shedding = GaugeMetricFamily(
            "qos_overload_shedding",
            "1 while an overload rule sheds the tier.",
            labels=["tier", "rule"],
        )
        for tier in Tier:
            reason = state.shedding[tier]
            shedding.add_metric(
                [tier.value, reason.value if reason else "none"], 1 if reason else 0
            )
        yield shedding
