"""Hugging Face Text Generation Inference, checked against its router (TGI 3.x; the
names are those of 1.x and 2.x too).

TGI exposes its batch (`tgi_batch_current_size`) and its queue (`tgi_queue_size`) but no
KV-cache gauge: a TGI pod counts for the in-flight rule only, never for the free-KV
watermark.
"""

from __future__ import annotations

from sidecar.loops.dialects.base import MetricsUnreadable, PodMetrics, Samples

NAME = "tgi"
PREFIX = "tgi_"
BATCH, QUEUE = "tgi_batch_current_size", "tgi_queue_size"
NAMES = (BATCH, QUEUE)  # the series read


def parse(samples: Samples) -> PodMetrics:
    if not samples.get(BATCH) and not samples.get(QUEUE):
        raise MetricsUnreadable(f"no {BATCH} or {QUEUE} in TGI's metrics")
    return PodMetrics(
        NAME,
        kv_usage=None,
        kv_blocks_total=0,
        kv_block_size=0,
        running=round(sum(s.value for s in samples.get(BATCH))),
        waiting=round(sum(s.value for s in samples.get(QUEUE))),
    )
