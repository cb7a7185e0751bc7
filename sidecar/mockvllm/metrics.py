"""The mock's /metrics: vLLM's metric names, read from the engine at scrape time."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.mockvllm.engine import Engine, Sequence


class EngineCollector(Collector):
    def __init__(self, engine: Engine, model: str) -> None:
        self._engine = engine
        self._model = model

    def collect(self) -> Iterator[Metric]:
        engine, labels = self._engine, ["model_name"]
        usage = engine.kv_cache_usage
        yield _gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            labels,
            self._model,
            usage,
        )
        yield _gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage (legacy name of vllm:kv_cache_usage_perc).",
            labels,
            self._model,
            usage,
        )
        yield _gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            labels,
            self._model,
            len(engine.running),
        )
        yield _gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            labels,
            self._model,
            len(engine.waiting),
        )
        config = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the KV cache configuration.",
            labels=["block_size", "num_gpu_blocks"],
        )
        config.add_metric([str(engine.config.block_size), str(engine.config.num_blocks)], 1.0)
        yield config
        for name, doc, value in (
            ("vllm:num_preemptions", "Cumulative number of preemptions.", engine.preemptions),
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
        ):
            counter = CounterMetricFamily(name, doc, labels=labels)
            counter.add_metric([self._model], value)
            yield counter


def _gauge(name: str, doc: str, labels: list[str], model: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    family.add_metric([model], value)
    return family


class LatencyMetrics:
    """Per-request latency histograms, observed when a sequence finishes."""

    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        self._model = model
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            ["model_name"],
            registry=registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0),
        )
        self.tpot = Histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            ["model_name"],
            registry=registry,
            buckets=(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5),
        )

    def observe(self, sequence: Sequence) -> None:
        times = sequence.token_times
        if not times:
            return
        self.ttft.labels(self._model).observe(times[0] - sequence.submitted_at)
        for earlier, later in itertools.pairwise(times):
            self.tpot.labels(self._model).observe(later - earlier)
