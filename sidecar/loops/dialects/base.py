"""What a dialect reads off a pod, and the samples it reads it from."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.samples import Sample


class MetricsUnreadable(ValueError):
    """The text has none of the figures a pod's load is read from."""


@dataclass(frozen=True)
class PodMetrics:
    dialect: str
    kv_usage: float | None  # 0..1; None: the server exposes no KV-cache figure (TGI)
    kv_blocks_total: int  # 0 when unknown
    kv_block_size: int  # tokens a block, 0 when unknown
    running: int
    waiting: int
    model: str = ""  # the served model, when the series name exactly one
    # Requests refused at the server's own queue limits since it started (vLLM's 503s).
    admission_rejections: int = 0


@dataclass(frozen=True)
class Samples:
    """One exposition's samples by name, for a dialect to read."""

    by_name: dict[str, list[Sample]]

    @classmethod
    def of(cls, samples: Iterable[Sample]) -> Samples:
        by_name: dict[str, list[Sample]] = defaultdict(list)
        for sample in samples:
            by_name[sample.name].append(sample)
        return cls(dict(by_name))

    def get(self, name: str) -> list[Sample]:
        return self.by_name.get(name, [])

    def where(self, name: str, label: str, value: str) -> list[Sample]:
        return [s for s in self.get(name) if s.labels.get(label) == value]

    def models(self, label: str) -> set[str]:
        return {
            s.labels[label]
            for samples in self.by_name.values()
            for s in samples
            if label in s.labels
        }


def per_group(samples: list[Sample], group: Callable[[Sample], object]) -> list[float]:
    """One value per group of series that repeat one figure (e.g. the tensor-parallel
    ranks of one data-parallel rank): the largest of each."""
    groups: dict[object, float] = {}
    for sample in samples:
        key = group(sample)
        groups[key] = max(groups.get(key, sample.value), sample.value)
    return list(groups.values())


def clamp_ratio(value: float) -> float:
    return min(max(value, 0.0), 1.0)


def only(models: set[str]) -> str:
    return next(iter(models)) if len(models) == 1 else ""
