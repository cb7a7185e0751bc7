"""The monitor's view of the pods' load and the shedding rules, as Prometheus gauges."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.config.base import Tier
from sidecar.loops.overload.monitor import LoadMonitor


class LoadCollector(Collector):
    """Exposes the monitor's view at scrape time (per-pod series come and go with pods)."""

    def __init__(self, monitor: LoadMonitor) -> None:
        self._monitor = monitor

    def collect(self) -> Iterator[Metric]:
        state = self._monitor.state
        load = state.load.as_reported
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
        refusing = GaugeMetricFamily(
            "qos_pod_refusing",
            "1 while a pod counts as full because its server refused requests at its own "
            "queue limits (vllm:admission_rejections rose; overload.refusal_hold_seconds).",
            labels=["pod"],
        )
        for pod in load.pods:
            age.add_metric([pod.pod_id], pod.age_seconds)
            if pod.kv_cache_usage is not None:  # a server without a KV figure: none
                usage.add_metric([pod.pod_id], pod.kv_cache_usage)
            refusing.add_metric([pod.pod_id], 1 if pod.refusing else 0)
        yield age
        yield usage
        yield refusing
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
        projected_free = GaugeMetricFamily(
            "qos_pool_projected_free_kv_ratio",
            "The pool's free KV-cache ratio with what was admitted since its pods' reports "
            "(what the shedding rules read).",
            labels=labels,
        )
        unreported = GaugeMetricFamily(
            "qos_pool_unreported_kv_blocks",
            "KV blocks of the admissions the pool's pods have not reported yet (projected).",
            labels=labels,
        )
        projected_in_flight = GaugeMetricFamily(
            "qos_pool_projected_requests_in_flight",
            "The pool's engines' requests with those admitted since their reports.",
            labels=labels,
        )
        in_flight = GaugeMetricFamily(
            "qos_pool_requests_in_flight",
            "Requests running or waiting in the pool's engines.",
            labels=labels,
        )
        capacity = GaugeMetricFamily(
            "qos_pool_capacity_tokens_per_second",
            "The pool's capacity in force: what its fresh pods report, else the configured; "
            "what its engines served lately with full queues, when less.",
            labels=labels,
        )
        served = GaugeMetricFamily(
            "qos_pool_served_tokens_per_second",
            "What the answers of the pool's engines cost its budgets a second lately, while "
            "they fell behind (fleet.follow_served_capacity); absent while not measured.",
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
            projected, load = state.load, state.load.as_reported
            reporting.add_metric([pool.name], len(load.pods))
            if load.free_kv_ratio is not None:
                free.add_metric([pool.name], load.free_kv_ratio)
            if projected.free_kv_ratio is not None:
                projected_free.add_metric([pool.name], projected.free_kv_ratio)
            in_flight.add_metric([pool.name], load.in_flight)
            projected_in_flight.add_metric([pool.name], projected.in_flight)
            unreported.add_metric([pool.name], projected.unreported_blocks)
            in_force = state.capacity(pool)
            capacity.add_metric([pool.name], in_force)
            if state.served is not None:
                served.add_metric([pool.name], state.served)
            for tier in Tier:
                reason = state.shedding[tier]
                rule = reason.value if reason else "none"
                shedding.add_metric([pool.name, tier.value, rule], 1 if reason else 0)
                rate.add_metric([pool.name, tier.value], snapshot.share(tier, pool) * in_force)
        yield from (reporting, free, projected_free, unreported, in_flight, projected_in_flight)
        yield from (capacity, served, shedding, rate)
