"""A process-wide tally of failed Redis calls, by component, for /metrics.

Like a logger, it is shared by everything in the process: each place that catches a
Redis error notes it here, so an operator sees which parts of the sidecar lost Redis.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

COMPONENTS = (
    "admission_records",
    "config",
    "fairness",
    "history",
    "identity",
    "limiter",
    "load_reports",
    "peers",
    "slo",
)
_counts: Counter[str] = Counter(dict.fromkeys(COMPONENTS, 0))
_last_error_at: float | None = None


def note(component: str) -> None:
    global _last_error_at
    _counts[component] += 1
    _last_error_at = time.monotonic()


def seconds_since_last_error() -> float | None:
    return None if _last_error_at is None else time.monotonic() - _last_error_at


class RedisErrorCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        errors = CounterMetricFamily(
            "qos_redis_errors",
            "Redis calls that failed, by the sidecar component making them.",
            labels=["component"],
        )
        for component, count in sorted(_counts.items()):
            errors.add_metric([component], count)
        yield errors
        since = seconds_since_last_error()
        if since is not None:
            yield GaugeMetricFamily(
                "qos_redis_last_error_age_seconds",
                "Seconds since a Redis call last failed (absent while none has).",
                value=since,
            )
