"""vLLM (v1 names, and the legacy ones before 0.7), checked against vLLM 0.33 and 0.6.

Per engine (every series carries `engine`; a data-parallel pod has several): KV usage is
averaged (the engines' caches are alike), running and waiting are summed. The block count
is taken once: every engine's `vllm:cache_config_info` repeats the pod's figure, already
summed over its engines (vLLM 0.33), so adding them up would count the pod once per
engine.
"""

from __future__ import annotations

from sidecar.loops.dialects.base import MetricsUnreadable, PodMetrics, Samples, clamp_ratio, only

NAME = "vllm"
PREFIX = "vllm:"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # new name first
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
CACHE_CONFIG = "vllm:cache_config_info"
# Requests its queue limits refused (--max-num-queued-reqs, --max-num-queued-tokens), by
# reason; vLLM 0.32 on, absent before.
ADMISSION_REJECTIONS = "vllm:admission_rejections_total"
NAMES = (*KV_USAGE, RUNNING, WAITING, CACHE_CONFIG, ADMISSION_REJECTIONS)  # the series read


def parse(samples: Samples) -> PodMetrics:
    usage = next((samples.get(name) for name in KV_USAGE if samples.get(name)), None)
    if not usage:
        raise MetricsUnreadable(f"no {' or '.join(KV_USAGE)} in vLLM's metrics")
    config = samples.get(CACHE_CONFIG)
    return PodMetrics(
        NAME,
        kv_usage=clamp_ratio(sum(s.value for s in usage) / len(usage)),
        kv_blocks_total=max((_count(s.labels.get("num_gpu_blocks")) for s in config), default=0),
        kv_block_size=max((_count(s.labels.get("block_size")) for s in config), default=0),
        running=round(sum(s.value for s in samples.get(RUNNING))),
        waiting=round(sum(s.value for s in samples.get(WAITING))),
        model=only(samples.models("model_name")),
        admission_rejections=round(sum(s.value for s in samples.get(ADMISSION_REJECTIONS))),
    )


def _count(value: str | None) -> int:
    """A count from an info label ("None" before vLLM has profiled its memory)."""
    try:
        return int(value or 0)
    except ValueError:
        return 0
