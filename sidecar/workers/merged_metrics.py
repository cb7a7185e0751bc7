"""The workers' /metrics as one exposition: every sample labelled with its worker's
`process`, each family once (Prometheus wants a family's samples together)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

PROCESS_LABEL = "process"


class _Parsed:
    """A collector yielding families already merged."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def merge(expositions: Mapping[int, str]) -> bytes:
    """Worker index → its exposition text, to one exposition."""
    families: dict[str, Metric] = {}
    for index, text in sorted(expositions.items()):
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            for sample in family.samples:
                labels = {**sample.labels, PROCESS_LABEL: str(index)}
                merged.samples.append(sample._replace(labels=labels))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Parsed(families.values()))
    return generate_latest(registry)
