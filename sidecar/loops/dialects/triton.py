"""Triton Inference Server's TensorRT-LLM backend, checked against the backend's
custom_metrics_reporter (tensorrtllm_backend v0.17.0, and v0.18.0 and later, which add
`waiting` and `fraction`).

`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max|free|used|tokens_per|fraction}`
and `nv_trt_llm_request_metrics{request_type=active|max|scheduled|context|waiting}`, each
labelled with the Triton `model` and `version`. Running is the requests scheduled in the
iteration; waiting is the `waiting` series (the executor's queued requests) where the
backend has it, else what the executor holds but did not schedule (active - scheduled),
so running + waiting is the executor's active count either way. Several TensorRT-LLM
models in one server are summed.
"""

from __future__ import annotations

from sidecar.loops.dialects.base import MetricsUnreadable, PodMetrics, Samples, clamp_ratio, only

NAME = "triton"
PREFIX = "nv_trt_llm_"
KV, REQUESTS = "nv_trt_llm_kv_cache_block_metrics", "nv_trt_llm_request_metrics"
KV_TYPE, REQUEST_TYPE = "kv_cache_block_type", "request_type"
NAMES = (KV, REQUESTS)  # the series read


def parse(samples: Samples) -> PodMetrics:
    def kv(kind: str) -> list[float]:
        return [s.value for s in samples.where(KV, KV_TYPE, kind)]

    def requests(kind: str) -> float:
        return sum(s.value for s in samples.where(REQUESTS, REQUEST_TYPE, kind))

    blocks, used = sum(kv("max")), sum(kv("used"))
    if blocks > 0:
        usage = used / blocks
    elif kv("fraction"):
        usage = sum(kv("fraction")) / len(kv("fraction"))
    else:
        raise MetricsUnreadable(f"no {KV} in Triton's metrics (is the model TensorRT-LLM?)")
    running = requests("scheduled")
    if samples.where(REQUESTS, REQUEST_TYPE, "waiting"):
        waiting = requests("waiting")
    else:
        waiting = max(0.0, requests("active") - running)
    return PodMetrics(
        NAME,
        kv_usage=clamp_ratio(usage),
        kv_blocks_total=int(blocks),
        kv_block_size=int(max(kv("tokens_per"), default=0)),
        running=round(running),
        waiting=round(waiting),
        model=only({s.labels["model"] for s in samples.get(KV) if "model" in s.labels}),
    )
