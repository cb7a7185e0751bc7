"""SLO compliance, tier shares, operator mode and controller leadership for Prometheus,
read at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode
from sidecar.config.snapshot import Snapshot
from sidecar.loops.slo.controller import SloController


class SloCollector(Collector):
    def __init__(self, controller: SloController, snapshot: Callable[[], Snapshot]) -> None:
        self._controller = controller
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snapshot = self._snapshot()
        compliance = GaugeMetricFamily(
            "qos_slo_compliance_ratio",
            "Share of the tier's fresh samples, cluster-wide, that met its SLO.",
            labels=["tier"],
        )
        samples = GaugeMetricFamily(
            "qos_slo_samples", "Fresh samples in the tier's cluster-wide window.", labels=["tier"]
        )
        target = GaugeMetricFamily(
            "qos_slo_target_ratio", "The compliance the tier's SLO asks for.", labels=["tier"]
        )
        share = GaugeMetricFamily(
            "qos_tier_share_ratio",
            "The tier's share of the fleet's rate, as in force.",
            labels=["tier"],
        )
        rate = GaugeMetricFamily(
            "qos_tier_rate_tokens_per_second",
            "The tier's bucket refill rate in force.",
            labels=["tier"],
        )
        for tier in Tier:
            measured = self._controller.compliance[tier]
            if measured.ratio is not None:
                compliance.add_metric([tier.value], measured.ratio)
            samples.add_metric([tier.value], measured.samples)
            target.add_metric([tier.value], snapshot.config.slo.targets[tier].compliance)
            share.add_metric([tier.value], snapshot.share(tier))
            rate.add_metric([tier.value], snapshot.tier_rate(tier))
        yield from (compliance, samples, target, share, rate)
        yield from self._per_pool(snapshot)
        mode = GaugeMetricFamily(
            "qos_operator_mode", "1 for the operator mode in force.", labels=["mode"]
        )
        for name in Mode:
            mode.add_metric([name.value], 1 if snapshot.mode.mode is name else 0)
        yield mode
        forced = GaugeMetricFamily(
            "qos_force_shed", "1 while the operator sheds the tier by hand.", labels=["tier"]
        )
        for tier in Tier:
            forced.add_metric([tier.value], 1 if tier in snapshot.mode.force_shed else 0)
        yield forced
        yield GaugeMetricFamily(
            "qos_controller_leader",
            "1 on the sidecar holding the SLO controller lease.",
            value=1 if self._controller.leading else 0,
        )

    def _per_pool(self, snapshot: Snapshot) -> Iterator[Metric]:
        """Compliance and shares per model pool (the configured capacity's rate)."""
        labels = ["pool", "tier"]
        compliance = GaugeMetricFamily(
            "qos_pool_slo_compliance_ratio",
            "Share of the pool's tier's fresh samples that met its SLO.",
            labels=labels,
        )
        share = GaugeMetricFamily(
            "qos_pool_tier_share_ratio",
            "The tier's share of the pool's rate, as in force.",
            labels=labels,
        )
        for pool in snapshot.pools:
            measured = self._controller.pool_compliance.get(pool.name, {})
            for tier in Tier:
                ratio = measured[tier].ratio if tier in measured else None
                if ratio is not None:
                    compliance.add_metric([pool.name, tier.value], ratio)
                share.add_metric([pool.name, tier.value], snapshot.share(tier, pool))
        yield compliance
        yield share
