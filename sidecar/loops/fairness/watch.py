"""Each pool's tiers' fair shares, read every second for /metrics (never per request)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

import redis.asyncio as redis
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.base import Tier
from sidecar.config.snapshot import Snapshot
from sidecar.loops.fairness.usage import TierFairness, read_tier_fairness, redis_now_ms

log = logging.getLogger(__name__)


class FairnessWatch:
    def __init__(
        self, client: redis.Redis, snapshot: Callable[[], Snapshot], interval: float = 1.0
    ) -> None:
        self._client = client
        self._snapshot = snapshot
        self._interval = interval
        self._background = Background()
        self.latest: dict[tuple[str, Tier], TierFairness] = {}

    async def start(self) -> None:
        self._background.start(self._run(), "fairness-watch")

    async def stop(self) -> None:
        await self._background.stop()

    async def refresh(self) -> None:
        snapshot = self._snapshot()
        latest = {}
        now_ms = await redis_now_ms(self._client)  # once for every tier
        for pool in snapshot.pools:
            for tier in Tier:
                rate = snapshot.tier_rate(tier, pool)
                latest[pool.name, tier] = await read_tier_fairness(
                    self._client, snapshot.config.fairness, tier.value, pool.name, rate, now_ms
                )
        self.latest = latest

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except (redis.RedisError, OSError, ValueError) as error:
                redis_errors.note("fairness")
                log.debug("fair shares not read: %s", error)
            await asyncio.sleep(self._interval)


class FairnessCollector(Collector):
    def __init__(self, watch: FairnessWatch, snapshot: Callable[[], Snapshot]) -> None:
        self._watch = watch
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        labels = ["pool", "tier"]
        active = GaugeMetricFamily(
            "qos_tier_active_tenants", "Tenants that asked the tier lately.", labels=labels
        )
        index = GaugeMetricFamily(
            "qos_tier_fairness_index",
            "Jain's index over the active tenants' served / entitled (1: all got their share).",
            labels=labels,
        )
        served = GaugeMetricFamily(
            "qos_tier_top_tenant_served_tokens_per_second",
            "What the tier's most served tenants got, over the fairness window (top N only).",
            labels=[*labels, "tenant"],
        )
        entitled = GaugeMetricFamily(
            "qos_tier_top_tenant_entitled_tokens_per_second",
            "Their weighted max-min fair share of the tier's rate, by what they wanted.",
            labels=[*labels, "tenant"],
        )
        top = self._snapshot().config.fairness.top_tenants
        for (pool, tier), fairness in sorted(self._watch.latest.items()):
            active.add_metric([pool, tier.value], len(fairness.tenants))
            if fairness.index is not None:
                index.add_metric([pool, tier.value], fairness.index)
            for usage in fairness.top(top):
                served.add_metric([pool, tier.value, usage.tenant], usage.served)
                entitled.add_metric([pool, tier.value, usage.tenant], usage.entitled)
        yield from (active, index, served, entitled)
