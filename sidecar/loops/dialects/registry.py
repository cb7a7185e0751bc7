"""The dialects by name, and which one an exposition speaks."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sidecar.loops.dialects import llamacpp, sglang, tgi, triton, trtllm, vllm
from sidecar.loops.dialects.base import MetricsUnreadable, PodMetrics, Samples
from sidecar.loops.dialects.exposition import samples_of


@dataclass(frozen=True)
class Dialect:
    name: str
    prefix: str  # every series of the server's own starts with it
    names: tuple[str, ...]  # the series it reads
    parse: Callable[[Samples], PodMetrics]

    def speaks(self, text: str) -> bool:
        return re.search(f"^{re.escape(self.prefix)}", text, re.MULTILINE) is not None

    def read(self, text: str) -> PodMetrics:
        return self.parse(samples_of(text, self.names))


DIALECTS = {
    module.NAME: Dialect(module.NAME, module.PREFIX, module.NAMES, module.parse)
    for module in (vllm, sglang, trtllm, triton, tgi, llamacpp)
}


def read(text: str, dialect: str = "") -> PodMetrics:
    """The pod's load from its /metrics text, in `dialect` or the one the text speaks."""
    if dialect:
        return DIALECTS[dialect].read(text)
    for candidate in DIALECTS.values():  # vLLM first
        if candidate.speaks(text):
            return candidate.read(text)
    raise MetricsUnreadable(
        "no model server's series (vllm:, sglang:, trtllm_, nv_trt_llm_, tgi_, llamacpp:) "
        "in the metrics: is vLLM started with --disable-log-stats? It removes every vllm: "
        "metric, and the reporter needs its KV-cache usage"
    )
