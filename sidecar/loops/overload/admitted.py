"""What an admission adds to its pool's load before the pods report it. Pure.

Pods report every 100 to 250 ms; a burst inside one interval would otherwise be admitted
against the last reading and run the KV cache past a watermark before the next report
says so. So every admission is projected at once: the KV blocks vLLM gives its prompt
when it schedules it (prompt + the first output token, in blocks of the pool's block
size) and one request in flight. It counts until a report newer than it arrives from
the pod it went to (as the load balancer spreads requests, a pod's share of it).
Cluster-wide, the charge records it with the buckets (sidecar/budget_layout.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from sidecar.budget_layout import AdmittedLoad

# A report received this soon after an admission may not show it yet (the request was
# still on its way to the engine when the pod was scraped): it still counts.
OVERLAP_SECONDS = 0.05
# vLLM's default --block-size, for pods that do not report theirs.
DEFAULT_BLOCK_SIZE = 16


def admitted_load(
    tier: str, pool: str, prompt_tokens: int, block_size: int, even_over_budget: bool = False
) -> AdmittedLoad:
    blocks = math.ceil((max(prompt_tokens, 0) + 1) / max(block_size, 1))
    return AdmittedLoad(tier, pool, blocks, even_over_budget)


@dataclass(frozen=True)
class Recent:
    """Admissions of one pool in one slot, as old as `age_seconds` (by their end)."""

    age_seconds: float
    blocks: float
    requests: float


@dataclass(frozen=True)
class RecentAdmissions:
    """One read of every tier's record: per pool, its slots; per tier, Redis's time (µs)
    when its record was read."""

    by_pool: dict[str, list[Recent]] = field(default_factory=dict)
    read_us: dict[str, int] = field(default_factory=dict)

    def holds(self, tier: str, recorded_us: int) -> bool:
        """Whether an admission recorded at `recorded_us` is in this read."""
        return 0 < recorded_us < self.read_us.get(tier, 0)


def unreported(recent: list[Recent], report_age_seconds: float) -> tuple[float, float]:
    """Blocks and requests admitted since a report this old (with the overlap)."""
    newer = [r for r in recent if r.age_seconds < report_age_seconds + OVERLAP_SECONDS]
    return sum(r.blocks for r in newer), sum(r.requests for r in newer)


class ProjectedAdmission:
    """One admission's projected load, from its decision until the reports show it."""

    def __init__(
        self,
        load: AdmittedLoad,
        clock: Callable[[], float],
        release: Callable[[ProjectedAdmission], None],
        settled: Callable[[ProjectedAdmission], None] = lambda _admission: None,
    ) -> None:
        self.load = load
        self._clock = clock
        self.at = clock()
        self.confirmed_at: float | None = None
        # When its budget call recorded it in Redis (Redis time, µs; 0: not recorded):
        # from the first read after that, it is counted from there.
        self.recorded_us = 0
        self.awaiting_record = False  # admitted, its charge (and record) still behind
        self.cancelled = False
        self._release = release
        self._settled = settled

    @property
    def settled(self) -> bool:
        """Whether it knows whether and when it was recorded: cancelled, or admitted with
        its record made (or none to come)."""
        return self.cancelled or (self.confirmed_at is not None and not self.awaiting_record)

    def confirm(self, recorded_us: int, recorded_later: bool = False) -> None:
        """Admitted; `recorded_us`: when its budget call recorded it in Redis, or 0;
        `recorded_later`: charged behind, its record then (see `recorded`)."""
        if not self.cancelled:
            self.confirmed_at, self.recorded_us = self._clock(), recorded_us
            self.awaiting_record = recorded_later
            if not recorded_later:
                self._settled(self)

    def recorded(self, recorded_us: int) -> None:
        """Its charge behind it was made: recorded at `recorded_us` (0: not recorded)."""
        if self.confirmed_at is not None and self.awaiting_record:
            self.recorded_us, self.awaiting_record = recorded_us, False
            self._settled(self)

    def cancel(self) -> None:
        """Not admitted after all: it adds nothing."""
        if not self.cancelled and self.confirmed_at is None:
            self.cancelled = True
            self._release(self)
            self._settled(self)
