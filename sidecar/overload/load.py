"""The cluster's load, aggregated from the pods' reports. Pure: no I/O.

Free-KV watermark: capacity-weighted over the pods with a fresh report,

    free = Σ blocks_i · (1 - usage_i) / Σ blocks_i

so a big pod that is nearly full counts for more than a small idle one. A pod that does
not report its block count is weighted as the median of those that do (all alike when
none do). In flight: Σ (running_i + waiting_i), the requests the engines hold.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class PodLoad:
    pod_id: str
    kv_cache_usage: float  # 0..1
    kv_blocks_total: int  # 0 when unknown
    running: int
    waiting: int
    age_seconds: float = 0.0  # since Redis received the report
    scheduling_policy: str = ""  # "priority", "fcfs"; "" when the reporter was not told


@dataclass(frozen=True)
class ClusterLoad:
    pods: tuple[PodLoad, ...]
    free_kv_ratio: float | None  # None when no pod has reported
    in_flight: int

    @property
    def known(self) -> bool:
        return bool(self.pods)


def aggregate(pods: Iterable[PodLoad]) -> ClusterLoad:
    fresh = tuple(sorted(pods, key=lambda p: p.pod_id))
    if not fresh:
        return ClusterLoad((), None, 0)
    known_sizes = [p.kv_blocks_total for p in fresh if p.kv_blocks_total > 0]
    stand_in = statistics.median(known_sizes) if known_sizes else 1.0
    weights = [p.kv_blocks_total if p.kv_blocks_total > 0 else stand_in for p in fresh]
    free = sum(
        w * (1.0 - min(max(p.kv_cache_usage, 0.0), 1.0))
        for w, p in zip(weights, fresh, strict=True)
    )
    return ClusterLoad(fresh, free / sum(weights), sum(p.running + p.waiting for p in fresh))
