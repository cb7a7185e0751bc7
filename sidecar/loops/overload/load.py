"""The cluster's load, aggregated from the pods' reports. Pure: no I/O.

Free-KV watermark: capacity-weighted over the pods with a fresh report,

    free = Σ blocks_i · (1 - usage_i) / Σ blocks_i

so a big pod that is nearly full counts for more than a small idle one. A pod that does
not report its block count is weighted as the median of those that do (all alike when
none do). In flight: Σ (running_i + waiting_i), the requests the engines hold. Capacity:
Σ of what the pods say they prefill, a pod that says nothing counted as the median one
(None when no pod says: the configured figure holds). Seats: Σ of the most requests each
pod was seen running at once (its max_num_seqs, once it has been full): past them an
admission waits in the engine's own queue.

A pod refusing at its queue limits (overload/refusals.py) counts as full, whatever its
KV use.

Projected load (overload/admitted.py): what was admitted since a pod's report, that pod's
share of it by its size, is added to the blocks in use and to the requests in flight;
`reported` keeps the view the reports alone give.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sidecar.config.pools import Pools
from sidecar.loops.overload.admitted import DEFAULT_BLOCK_SIZE, Recent, unreported


@dataclass(frozen=True)
class PodLoad:
    pod_id: str
    kv_cache_usage: float | None  # 0..1; None: its server has no KV-cache figure (TGI)
    kv_blocks_total: int  # 0 when unknown
    running: int
    waiting: int
    age_seconds: float = 0.0  # since Redis received the report
    scheduling_policy: str = ""  # "priority", "fcfs"; "" when the reporter was not told
    model: str = ""  # the served model name vLLM's metrics carry
    pool: str = ""  # the pool its reporter named; "": the pool serving `model`
    capacity_tokens_per_second: float = 0.0  # 0 when its reporter was not told
    kv_block_size: int = 0  # tokens per KV block, 0 when unknown
    admission_rejections: int = 0  # what its server refused at its queue limits, so far
    # Its server refused requests at its queue limits lately: it counts as full (refusals.py).
    refusing: bool = False


@dataclass(frozen=True)
class ClusterLoad:
    pods: tuple[PodLoad, ...]
    free_kv_ratio: float | None  # None when no pod has reported
    in_flight: int
    # What the pods say they prefill, tokens a second; None when none says.
    capacity_tokens_per_second: float | None = None
    kv_blocks_total: float = 0.0  # over the pods, 0 when none says its count
    kv_block_size: int = DEFAULT_BLOCK_SIZE  # the pods' (median), vLLM's default if unsaid
    seats: int = 0  # requests the pods run at once, as seen (0: none seen running)
    # Every pod schedules by the priority sent (a newcomer waits only behind its betters).
    by_priority: bool = False
    # Admitted since the reports, not yet in them (projected), and the reports' own view.
    unreported_blocks: float = 0.0
    reported: ClusterLoad | None = None

    @property
    def known(self) -> bool:
        return bool(self.pods)

    @property
    def as_reported(self) -> ClusterLoad:
        return self.reported or self

    def unreported_in(self, recent: list[Recent]) -> tuple[float, float]:
        """Blocks and requests of `recent` admissions the reports do not show yet: each
        pod's share (by its size, as the load balancer spreads them) of those admitted
        since its own report."""
        pods = self.as_reported.pods
        if not pods or not recent:
            return 0.0, 0.0
        weights = _stand_in_for_unknown([p.kv_blocks_total for p in pods])
        total = sum(weights)
        blocks = requests = 0.0
        for weight, pod in zip(weights, pods, strict=True):
            pod_blocks, pod_requests = unreported(recent, pod.age_seconds)
            blocks += pod_blocks * weight / total
            requests += pod_requests * weight / total
        return blocks, requests

    def plus(self, blocks: float, requests: float) -> ClusterLoad:
        """The reported load with `blocks` and `requests` more (projected). Free KV moves
        only when the pods say how many blocks they have."""
        base = self.as_reported
        if not base.known or (blocks <= 0 and requests <= 0):
            return base
        free = base.free_kv_ratio
        if free is not None and base.kv_blocks_total > 0:
            free = max(0.0, free - blocks / base.kv_blocks_total)
        return dataclasses.replace(
            base,
            free_kv_ratio=free,
            in_flight=base.in_flight + round(requests),
            unreported_blocks=blocks,
            reported=base,
        )


def aggregate(
    pods: Iterable[PodLoad], most_running: Mapping[str, int] | None = None
) -> ClusterLoad:
    """The load of `pods`; `most_running`: the most each pod was seen running before."""
    fresh = tuple(sorted(pods, key=lambda p: p.pod_id))
    most_running = most_running or {}
    if not fresh:
        return ClusterLoad((), None, 0)
    weights = _stand_in_for_unknown([p.kv_blocks_total for p in fresh])
    # The watermark is over the pods that say their KV use; the others count in flight.
    # A pod refusing at its queue limits counts as full, whatever its KV use.
    known = [
        (w, usage)
        for w, p in zip(weights, fresh, strict=True)
        if (usage := 1.0 if p.refusing else p.kv_cache_usage) is not None
    ]
    free: float | None = None
    if known:
        free = sum(w * (1.0 - min(max(u, 0.0), 1.0)) for w, u in known)
        free /= sum(w for w, _ in known)
    capacities = [p.capacity_tokens_per_second for p in fresh]
    capacity = sum(_stand_in_for_unknown(capacities)) if any(c > 0 for c in capacities) else None
    sizes = [p.kv_block_size for p in fresh if p.kv_block_size > 0]
    return ClusterLoad(
        fresh,
        free,
        sum(p.running + p.waiting for p in fresh),
        capacity,
        kv_blocks_total=sum(w for w, _ in known)
        if any(p.kv_blocks_total > 0 for p in fresh)
        else 0.0,
        kv_block_size=round(statistics.median(sizes)) if sizes else DEFAULT_BLOCK_SIZE,
        seats=sum(max(p.running, most_running.get(p.pod_id, 0)) for p in fresh),
        by_priority=all(p.scheduling_policy == "priority" for p in fresh),
    )


def pool_of(pod: PodLoad, pools: Pools) -> str | None:
    """The pool a pod's load counts for: the one its reporter named, else the one serving
    its model; None when that names no configured pool."""
    if pod.pool:
        return pod.pool if pools.get(pod.pool) is not None else None
    pool = pools.for_model(pod.model or None)
    return pool.name if pool is not None else None


def _stand_in_for_unknown(sizes: list[float]) -> list[float]:
    """Each pod's size, the median of the known ones for a pod that says none (all alike
    when none says)."""
    known = [size for size in sizes if size > 0]
    stand_in = statistics.median(known) if known else 1.0
    return [size if size > 0 else stand_in for size in sizes]
