"""TensorRT-LLM's own OpenAI server, `trtllm-serve`, checked against
tensorrt_llm/metrics/collector.py (TensorRT-LLM main, 2026).

Its iteration gauges are only filled with `enable_iter_perf_stats: true` in the LLM's
arguments. `trtllm_kv_cache_utilization` is used / max blocks; running is the executor's
active requests, waiting its queued ones. Every series carries `model_name` and
`engine_type`; a server exporting several engines' series is summed.
"""

from __future__ import annotations

from sidecar.loops.dialects.base import MetricsUnreadable, PodMetrics, Samples, clamp_ratio, only

NAME = "trtllm"
PREFIX = "trtllm_"
UTILIZATION = "trtllm_kv_cache_utilization"
MAX_BLOCKS, USED_BLOCKS = "trtllm_kv_cache_max_blocks", "trtllm_kv_cache_used_blocks"
TOKENS_PER_BLOCK = "trtllm_kv_cache_tokens_per_block"
RUNNING, WAITING = "trtllm_num_requests_running", "trtllm_num_requests_waiting"
NAMES = (UTILIZATION, MAX_BLOCKS, USED_BLOCKS, TOKENS_PER_BLOCK, RUNNING, WAITING)


def parse(samples: Samples) -> PodMetrics:
    blocks = sum(s.value for s in samples.get(MAX_BLOCKS))
    used = samples.get(USED_BLOCKS)
    if blocks > 0 and used:
        usage = sum(s.value for s in used) / blocks
    elif samples.get(UTILIZATION):
        ratios = [s.value for s in samples.get(UTILIZATION)]
        usage = sum(ratios) / len(ratios)
    else:
        raise MetricsUnreadable(
            f"no {UTILIZATION} in trtllm-serve's metrics: start it with "
            "enable_iter_perf_stats: true, which fills its iteration gauges"
        )
    return PodMetrics(
        NAME,
        kv_usage=clamp_ratio(usage),
        kv_blocks_total=int(blocks),
        kv_block_size=int(max((s.value for s in samples.get(TOKENS_PER_BLOCK)), default=0)),
        running=round(sum(s.value for s in samples.get(RUNNING))),
        waiting=round(sum(s.value for s in samples.get(WAITING))),
        model=only(samples.models("model_name")),
    )
