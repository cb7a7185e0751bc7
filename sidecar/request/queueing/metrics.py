"""The admission queue's state for Prometheus, read at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.config.base import Tier
from sidecar.request.queueing.queue import AdmissionQueue


class QueueCollector(Collector):
    def __init__(self, queue: AdmissionQueue) -> None:
        self._queue = queue

    def collect(self) -> Iterator[Metric]:
        queue = self._queue
        in_flight = GaugeMetricFamily(
            "qos_requests_in_flight",
            "Requests this sidecar admitted whose exchange has not ended (slots held).",
            labels=["tier"],
        )
        waiting = GaugeMetricFamily(
            "qos_queue_waiting",
            "Requests waiting in this sidecar's admission queue.",
            labels=["tier"],
        )
        held = queue.slots.by_tier()
        for tier in Tier:
            in_flight.add_metric([tier.value], held[tier])
            waiting.add_metric([tier.value], queue.scheduler.waiting(tier))
        yield in_flight
        yield waiting
        yield GaugeMetricFamily(
            "qos_cluster_slots_in_flight",
            "Slots held by every sidecar together (peers as of their last heartbeat).",
            value=queue.cluster_in_flight,
        )
        pool_in_flight = GaugeMetricFamily(
            "qos_pool_slots_in_flight",
            "Slots held in the model pool by every sidecar together.",
            labels=["pool"],
        )
        pool_waiting = GaugeMetricFamily(
            "qos_pool_queue_waiting",
            "Requests waiting in this sidecar's admission queue for the pool's slots.",
            labels=["pool", "tier"],
        )
        for pool, scheduler in sorted(queue.schedulers.items()):
            pool_in_flight.add_metric([pool], queue.cluster_in_flight_in(pool))
            for tier in Tier:
                pool_waiting.add_metric([pool, tier.value], scheduler.waiting(tier))
        yield pool_in_flight
        yield pool_waiting
        yield CounterMetricFamily(
            "qos_slots_reclaimed",
            "Slots taken back after their lease because their end was never reported.",
            value=queue.reclaimed,
        )
