"""SGLang, checked against python/sglang/srt/metrics/collector.py (SGLang 0.5).

Each scheduler exports its gauges with `model_name` and its ranks (`tp_rank`, `pp_rank`,
`dp_rank` with data-parallel attention, `moe_ep_rank`, ...). The tensor- and
pipeline-parallel ranks of one scheduler repeat its figures, so they are taken once per
data-parallel rank; the data-parallel ranks each have their own KV pool and requests, so
those are summed. Capacity is in tokens (`sglang:max_total_num_tokens`), not blocks; with
the page size `sglang:cache_config_info` may carry, it is turned into pages, else the
pool counts as blocks of one token (SGLang's default page size). `cache_config_info`
(`page_size`, `num_pages`, from SGLang 0.5.10) gives the pages directly.
"""

from __future__ import annotations

from prometheus_client.samples import Sample

from sidecar.loops.dialects.base import (
    MetricsUnreadable,
    PodMetrics,
    Samples,
    clamp_ratio,
    only,
    per_group,
)

NAME = "sglang"
PREFIX = "sglang:"
USAGE, USED, CAPACITY = (
    "sglang:token_usage",
    "sglang:num_used_tokens",
    "sglang:max_total_num_tokens",
)
RUNNING, QUEUED = "sglang:num_running_reqs", "sglang:num_queue_reqs"
CACHE_CONFIG = "sglang:cache_config_info"
NAMES = (USAGE, USED, CAPACITY, RUNNING, QUEUED, CACHE_CONFIG)  # the series read
# Labels of the ranks that repeat one scheduler's figures.
REPEATING_RANKS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"})


def parse(samples: Samples) -> PodMetrics:
    if not samples.get(USAGE) and not samples.get(USED):
        raise MetricsUnreadable(f"no {USAGE} or {USED} in SGLang's metrics")
    used = sum(per_group(samples.get(USED), _scheduler))
    capacity = sum(per_group(samples.get(CAPACITY), _scheduler))
    if capacity > 0 and samples.get(USED):
        usage = used / capacity
    else:
        ratios = per_group(samples.get(USAGE), _scheduler)
        usage = sum(ratios) / len(ratios)
    config = samples.get(CACHE_CONFIG)
    page = max((_label_count(s, "page_size") for s in config), default=0) or 1
    pages = sum(per_group([_pages(s) for s in config], _scheduler))
    blocks = int(pages or capacity // page)
    return PodMetrics(
        NAME,
        kv_usage=clamp_ratio(usage),
        kv_blocks_total=blocks,
        kv_block_size=page if blocks else 0,
        running=round(sum(per_group(samples.get(RUNNING), _scheduler))),
        waiting=round(sum(per_group(samples.get(QUEUED), _scheduler))),
        model=only(samples.models("model_name")),
    )


def _scheduler(sample: Sample) -> tuple:
    """The scheduler a series is from: its labels less the ranks that repeat it."""
    return tuple(sorted((k, v) for k, v in sample.labels.items() if k not in REPEATING_RANKS))


def _label_count(sample: Sample, label: str) -> int:
    try:
        return int(sample.labels.get(label) or 0)
    except ValueError:
        return 0


def _pages(sample: Sample) -> Sample:
    """The info series with its page count as value, to take once per scheduler."""
    return Sample(sample.name, sample.labels, _label_count(sample, "num_pages"))
