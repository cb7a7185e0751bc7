"""The mock's /metrics as vLLM 0.33 exposes them, read from the engine at scrape time.

Every series carries `model_name` and `engine` (one engine here: "0"); the legacy
`vllm:gpu_cache_usage_perc` and the TPOT histogram are gone in 0.33, as are they here.
`vllm:cache_config_info` carries the cache configuration as labels (values are strings).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.tooling.mockvllm.engine import Engine, QueueFull, Sequence

LABELS = ["model_name", "engine"]
ENGINE_INDEX = "0"
# vLLM's buckets for the inter-token latency histograms.
_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)


class EngineCollector(Collector):
    def __init__(self, engine: Engine, model: str) -> None:
        self._engine = engine
        self._model = model

    def collect(self) -> Iterator[Metric]:
        engine = self._engine
        gauges = (
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                len(engine.running),
            ),
            (
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                len(engine.waiting),
            ),
            (
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                engine.kv_cache_usage,
            ),
        )
        counters = (
            (
                "vllm:num_preemptions",
                "Cumulative number of preemption from the engine.",
                engine.preemptions,
            ),
            (
                "vllm:prompt_tokens",
                "Number of prefill tokens processed.",
                engine.prompt_tokens_total,
            ),
            (
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                engine.generation_tokens_total,
            ),
            (
                # The mock's own, not vLLM's: how busy its "GPU" was (bench promo).
                "mock:engine_busy_seconds",
                "Seconds the engine spent computing steps (wall clock, time scale applied).",
                engine.busy_seconds,
            ),
        )
        for kind, rows in ((GaugeMetricFamily, gauges), (CounterMetricFamily, counters)):
            for name, doc, value in rows:
                family = kind(name, doc, labels=LABELS)
                family.add_metric([self._model, ENGINE_INDEX], value)
                yield family
        rejections = CounterMetricFamily(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            labels=["model_name", "reason"],
        )
        rejections.add_metric([self._model, QueueFull.REASON], engine.admission_rejections)
        yield rejections
        yield self._cache_config()

    def _cache_config(self) -> GaugeMetricFamily:
        config = self._engine.config
        info = {
            "block_size": str(config.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": "True",
            "gpu_memory_utilization": "0.92",
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(config.num_blocks),
            "num_gpu_blocks_override": "None",
            "engine": ENGINE_INDEX,
        }
        family = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=list(info),
        )
        family.add_metric(list(info.values()), 1.0)
        return family


class LatencyMetrics:
    """Per-request latency histograms, observed when a sequence finishes."""

    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        self._labels = (model, ENGINE_INDEX)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            LABELS,
            registry=registry,
            buckets=(0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0),
        )
        self.inter_token = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            LABELS,
            registry=registry,
            buckets=_ITL_BUCKETS,
        )
        self.request_tpot = Histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            LABELS,
            registry=registry,
            buckets=_ITL_BUCKETS,
        )

    def observe(self, sequence: Sequence) -> None:
        times = sequence.token_times
        if not times:
            return
        self.ttft.labels(*self._labels).observe(times[0] - sequence.submitted_at)
        for earlier, later in itertools.pairwise(times):
            self.inter_token.labels(*self._labels).observe(later - earlier)
        if len(times) > 1:
            per_token = (times[-1] - times[0]) / (len(times) - 1)
            self.request_tpot.labels(*self._labels).observe(per_token)
