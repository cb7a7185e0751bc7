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
from collections.abc import Callable, Iterable, Iterator

import redis.asyncio as redis
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.schema import Tier
from sidecar.config.store import Snapshot
from sidecar.overload.load import PodLoad, aggregate, pool_of
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
        gateway_in_flight: Callable[[str | None], int] = lambda _pool: 0,
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
        self._update(pods)
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

    def snapshot(self) -> Snapshot:
        return self._snapshot()

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
        self._update(self.state.load.pods)

    def _update(self, pods: Iterable[PodLoad]) -> None:
        """The state over all pods, and each pool's over its own pods."""
        snapshot = self._snapshot()
        config, pools = snapshot.config, snapshot.pools
        pods = tuple(pods)
        self.state.update(aggregate(pods), config, self._gateway_in_flight(None))
        by_pool: dict[str, list[PodLoad]] = {pool.name: [] for pool in pools}
        for pod in pods:
            pool = pool_of(pod, pools)
            if pool is not None:
                by_pool[pool].append(pod)
        states = {}
        for pool in pools:
            state = self.state.pools.get(pool.name) or SheddingState()
            load = aggregate(by_pool[pool.name])
            state.update(load, config, self._gateway_in_flight(pool.name), pool)
            states[pool.name] = state
        self.state.pools = states

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
            "1 while an overload rule sheds the tier (over all pods; per pool below).",
            labels=["tier", "rule"],
        )
        for tier in Tier:
            reason = state.shedding[tier]
            shedding.add_metric(
                [tier.value, reason.value if reason else "none"], 1 if reason else 0
            )
        yield shedding
        yield from self._per_pool()

    def _per_pool(self) -> Iterator[Metric]:
        """The same views per model pool (one series set per configured pool)."""
        snapshot = self._monitor.snapshot()
        pools = snapshot.pools
        labels = ["pool"]
        reporting = GaugeMetricFamily(
            "qos_pool_pods_reporting", "Pods of the pool with a fresh load report.", labels=labels
        )
        free = GaugeMetricFamily(
            "qos_pool_free_kv_ratio",
            "Capacity-weighted free KV-cache ratio of the pool's reporting pods.",
            labels=labels,
        )
        in_flight = GaugeMetricFamily(
            "qos_pool_requests_in_flight",
            "Requests running or waiting in the pool's engines.",
            labels=labels,
        )
        capacity = GaugeMetricFamily(
            "qos_pool_capacity_tokens_per_second",
            "The pool's capacity in force: what its fresh pods report, else the configured.",
            labels=labels,
        )
        shedding = GaugeMetricFamily(
            "qos_pool_overload_shedding",
            "1 while an overload rule sheds the tier in the pool.",
            labels=["pool", "tier", "rule"],
        )
        rate = GaugeMetricFamily(
            "qos_pool_tier_rate_tokens_per_second",
            "The tier's bucket refill rate in the pool: its share of the capacity in force.",
            labels=["pool", "tier"],
        )
        for pool in pools:
            state = self._monitor.state.for_pool(pool.name)
            load = state.load
            reporting.add_metric([pool.name], len(load.pods))
            if load.free_kv_ratio is not None:
                free.add_metric([pool.name], load.free_kv_ratio)
            in_flight.add_metric([pool.name], load.in_flight)
            in_force = state.capacity(pool)
            capacity.add_metric([pool.name], in_force)
            for tier in Tier:
                reason = state.shedding[tier]
                rule = reason.value if reason else "none"
                shedding.add_metric([pool.name, tier.value, rule], 1 if reason else 0)
                rate.add_metric([pool.name, tier.value], snapshot.share(tier, pool) * in_force)
        yield from (reporting, free, in_flight, capacity, shedding, rate)
