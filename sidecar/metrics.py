"""The sidecar's Prometheus metrics, in a registry of its own."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.config.base import Tier

# The *_created series double the exposition and no dashboard here reads them.
disable_created_metrics()


class SidecarMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # Each labelled series looked up once: labels() checks and locks on every call.
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.decisions = Counter(
            "qos_decisions",
            "Admission decisions, by tier, outcome, reason and model pool.",
            ["tier", "outcome", "reason", "pool"],
            registry=self.registry,
        )
        self.decision_seconds = Histogram(
            "qos_decision_duration_seconds",
            "Time to decide one request, from the complete request to the answer.",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1),
            registry=self.registry,
        )
        self.streams_open = Gauge(
            "qos_extproc_streams_open",
            "ext_proc streams (HTTP exchanges) Envoy has open with this sidecar.",
            registry=self.registry,
        )
        self.config_version = Gauge(
            "qos_config_version",
            "Version of the QoS configuration this sidecar has in force.",
            registry=self.registry,
        )
        self.config_put_back = Counter(
            "qos_config_put_back",
            "Times this sidecar put back into Redis the configuration Redis had lost "
            "(restarted empty, rolled back, or made anew), tenants and key hashes with it.",
            registry=self.registry,
        )
        self.config_source = Gauge(
            "qos_config_source",
            "1 for where the configuration in force comes from: redis; local_copy (the "
            "last known good copy on disk, Redis not reached since start); safe (neither: "
            "core-only and no tenant known until Redis answers).",
            ["source"],
            registry=self.registry,
        )
        self.config_copy_version = Gauge(
            "qos_config_copy_version",
            "Version of the configuration this sidecar last wrote to its copy on disk.",
            registry=self.registry,
        )
        self.state_write_failures = Gauge(
            "qos_state_write_failures",
            "Writes into the state directory that failed since start (each is retried), by "
            "what: copy (the last known good configuration), envoy_layer (the mode Envoy "
            "reads without the sidecar). Growing: the directory is not writable or full.",
            ["what"],
            registry=self.registry,
        )
        self.reports_refused = Counter(
            "qos_load_reports_refused",
            "Pushed load reports refused, never applied: unauthenticated (no token or the "
            "wrong one), or invalid.",
            ["reason"],
            registry=self.registry,
        )
        self.grpc_refused = Counter(
            "qos_grpc_calls_refused",
            "Calls to Envoy's services (ext_proc, access_log, runtime) refused for want of "
            "Envoy's token (reason missing or wrong): nothing they said was applied.",
            ["service", "reason"],
            registry=self.registry,
        )
        self.config_file_refused = Gauge(
            "qos_config_file_refused",
            "1 while a configuration or tenants file this sidecar was given is refused (it "
            "does not read or validate); the last good configuration stays in force.",
            ["file"],
            registry=self.registry,
        )
        self.config_invalid = Gauge(
            "qos_config_invalid",
            "1 while the configuration document in Redis does not validate (the sidecar "
            "keeps its last good version; one that started so is not ready).",
            registry=self.registry,
        )
        self.queue_wait_seconds = Histogram(
            "qos_queue_wait_seconds",
            "Time admitted requests waited in the admission queue for a slot.",
            ["tier"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25),
            registry=self.registry,
        )
        self.queue_wait_error = Histogram(
            "qos_queue_wait_error_seconds",
            "Waited minus foreseen seconds of requests admitted from the queue whose wait "
            "was foreseen (those foreseen too long were answered at once: "
            "reason shed_queue_foreseen; those that waited it out: shed_queue_timeout).",
            ["tier", "pool"],
            buckets=(-5, -2.5, -1, -0.5, -0.25, -0.1, 0, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.first_token_error = Histogram(
            "qos_first_token_forecast_error_seconds",
            "Admission-to-first-token seconds of the timed streams less their foreseen "
            "ones (the engines' queue ahead of them and what streams took lately beyond "
            "it); those foreseen past their TTFT target were answered at once: reason "
            "shed_first_token_foreseen.",
            ["tier", "pool"],
            buckets=(-5, -2.5, -1, -0.5, -0.25, -0.1, 0, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.shed_after_wait = Histogram(
            "qos_shed_after_wait_seconds",
            "Seconds requests were held before they were answered with a refusal after "
            "all: waits foreseen to fit that did not. Every other refusal is answered "
            "at once (qos_decisions_total has them all).",
            ["tier", "reason", "pool"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30),
            registry=self.registry,
        )
        self.overflowed = Counter(
            "qos_overflow_requests",
            "Requests their own pool shed for its load or budget that another pool its "
            "tier overflows to admitted, by the pool that shed them, the pool that took "
            "them, and tier.",
            ["from_pool", "to_pool", "tier"],
            registry=self.registry,
        )
        self.overflowed_tokens = Counter(
            "qos_overflow_tokens",
            "Budget tokens the overflowed requests were charged in the pool that took them.",
            ["from_pool", "to_pool", "tier"],
            registry=self.registry,
        )
        self.evictions = Counter(
            "qos_evictions",
            "Running streams ended early, well-formed, to free their GPUs' memory for the "
            "tiers above (overload.evict_below_free_kv), by pool and tier.",
            ["pool", "tier"],
            registry=self.registry,
        )
        self.exchange_ends = Counter(
            "qos_exchange_ends",
            "Admitted exchanges whose end gave their slot back, by tier and how they ended.",
            ["tier", "how"],
            registry=self.registry,
        )
        self.adjustments = Counter(
            "qos_controller_adjustments",
            "Budget moves the SLO controller made (this sidecar, while it led).",
            ["direction"],
            registry=self.registry,
        )
        for direction in ("to_p0", "from_p0"):  # series exist from the start, at 0
            self.adjustments.labels(direction)
        self.output_reserved = Counter(
            "qos_output_reserved_tokens",
            "Output tokens admitted requests reserved, of those settled (tiers with an "
            "output_weight), by tier.",
            ["tier"],
            registry=self.registry,
        )
        self.output_settled = Counter(
            "qos_output_settled_tokens",
            "Output tokens those requests really had, by tier and by where the count came "
            "from: the answer's usage, an estimate from a stream's size, all it asked for "
            "(abandoned), or none (refused: a 503 before any work).",
            ["tier", "source"],
            registry=self.registry,
        )
        self.estimate_error = Histogram(
            "qos_output_estimate_error_ratio",
            "(estimated - real) / real output tokens of streams that carried their usage: "
            "how far the estimate from a stream's size, used for those that do not, is.",
            buckets=(-0.2, -0.1, -0.05, -0.02, -0.01, 0, 0.01, 0.02, 0.05, 0.1, 0.2),
            registry=self.registry,
        )
        self.admitted_cost = Counter(
            "qos_admitted_cost_tokens",
            "Budget tokens admitted requests reserved at admission (at most their smallest "
            "burst; the rest is owed at settlement), by tier and route "
            "kind (chat, responses, messages, input_only, ...).",
            ["tier", "route"],
            registry=self.registry,
        )
        self.decider_errors = Counter(
            "qos_decider_errors",
            "Requests admitted unjudged because deciding failed (the sidecar's own fault: "
            "what a client sent is refused instead, never counted here).",
            registry=self.registry,
        )
        self.protocol_errors = Counter(
            "qos_extproc_protocol_errors",
            "ext_proc messages that did not fit the exchange's phase.",
            registry=self.registry,
        )

    def child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, kept: the decisions' hot path asks for few series."""
        key = (id(metric), values)  # the metrics live as long as this object
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found


class BucketLevelCollector(Collector):
    """Tokens left in each pool's tier buckets, as this sidecar last saw them (Redis holds
    the truth; it changes with every decision anywhere in the cluster)."""

    def __init__(self, levels: Mapping[tuple[str, Tier], float]) -> None:
        self._levels = levels

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "qos_bucket_tokens",
            "Tokens left in the tier's bucket of the pool at this sidecar's last call.",
            labels=["pool", "tier"],
        )
        debt = GaugeMetricFamily(
            "qos_bucket_debt_tokens",
            "Tokens the tier's bucket of the pool owes (answers that cost more than they "
            "reserved), at this sidecar's last call; it admits again once refilled past 0.",
            labels=["pool", "tier"],
        )
        for (pool, tier), level in sorted(self._levels.items()):
            family.add_metric([pool, tier.value], level)
            debt.add_metric([pool, tier.value], max(0.0, -level))
        yield family
        yield debt
