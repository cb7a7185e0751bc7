"""The dialects by name, and which one an exposition speaks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from sidecar.dialects import sglang, tgi, triton, trtllm, vllm
from sidecar.dialects.base import MetricsUnreadable, PodMetrics, Samples


@dataclass(frozen=True)
class Dialect:
    name: str
    prefix: str  # every series of the server's own starts with it
    parse: Callable[[Samples], PodMetrics]


DIALECTS = {
    module.NAME: Dialect(module.NAME, module.PREFIX, module.parse)
    for module in (vllm, sglang, trtllm, triton, tgi)
}


def read(text: str, dialect: str = "") -> PodMetrics:
    """The pod's load from its /metrics text, in `dialect` or the one the text speaks."""
    samples = Samples.of(
        s for family in text_string_to_metric_families(text) for s in family.samples
    )
    if dialect:
        return DIALECTS[dialect].parse(samples)
    for candidate in DIALECTS.values():
        if any(name.startswith(candidate.prefix) for name in samples.by_name):
            return candidate.parse(samples)
    raise MetricsUnreadable(
        "no model server's series (vllm:, sglang:, trtllm_, nv_trt_llm_, tgi_) in the "
        "metrics: is vLLM started with --disable-log-stats? It removes every vllm: "
        "metric, and the reporter needs its KV-cache usage"
    )
