"""The mock's load in other model servers' metric dialects (`mock-vllm --metrics-dialect`),
named and labelled as each server's own exporter does (see sidecar/loops/dialects/), so a
reporter can be tried against each without its GPU. Read from the engine at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar.tooling.mockvllm.engine import Engine


class DialectCollector(Collector):
    def __init__(self, engine: Engine, model: str, dialect: str) -> None:
        self._engine = engine
        self._model = model
        self._series = {
            "sglang": self._sglang,
            "trtllm": self._trtllm,
            "triton": self._triton,
            "tgi": self._tgi,
            "llamacpp": self._llamacpp,
        }[dialect]

    def collect(self) -> Iterator[Metric]:
        return self._series()

    def _figures(self) -> tuple[int, int, int, int, int]:
        """Blocks in all, blocks used, tokens a block, running, waiting."""
        engine = self._engine
        blocks = engine.config.num_blocks
        used = blocks - engine.free_blocks
        return blocks, used, engine.config.block_size, len(engine.running), len(engine.waiting)

    def _gauges(self, labels: dict[str, str], rows) -> Iterator[Metric]:
        for name, doc, value in rows:
            family = GaugeMetricFamily(name, doc, labels=list(labels))
            family.add_metric(list(labels.values()), value)
            yield family

    def _sglang(self) -> Iterator[Metric]:
        blocks, used, size, running, waiting = self._figures()
        labels = {"model_name": self._model, "engine_type": "unified", "tp_rank": "0"}
        labels["pp_rank"] = "0"
        yield from self._gauges(
            labels,
            (
                ("sglang:num_running_reqs", "The number of running requests.", running),
                ("sglang:num_used_tokens", "The number of used tokens.", used * size),
                ("sglang:token_usage", "The token usage.", used / blocks),
                ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", waiting),
                (
                    "sglang:max_total_num_tokens",
                    "Maximum total number of tokens in the KV cache pool.",
                    blocks * size,
                ),
            ),
        )

    def _trtllm(self) -> Iterator[Metric]:
        blocks, used, size, running, waiting = self._figures()
        labels = {"model_name": self._model, "engine_type": "trtllm"}
        yield from self._gauges(
            labels,
            (
                ("trtllm_kv_cache_utilization", "KV cache utilization", used / blocks),
                ("trtllm_num_requests_running", "Number of active requests", running),
                ("trtllm_num_requests_waiting", "Number of queued requests", waiting),
                ("trtllm_kv_cache_max_blocks", "Maximum number of KV cache blocks", blocks),
                ("trtllm_kv_cache_free_blocks", "Number of free KV cache blocks", blocks - used),
                ("trtllm_kv_cache_used_blocks", "Number of used KV cache blocks", used),
                ("trtllm_kv_cache_tokens_per_block", "Number of tokens per KV cache block", size),
            ),
        )

    def _triton(self) -> Iterator[Metric]:
        blocks, used, size, running, waiting = self._figures()
        common = {"model": "tensorrt_llm", "version": "1"}
        requests = GaugeMetricFamily(
            "nv_trt_llm_request_metrics",
            "TRT LLM request metrics",
            labels=["model", "request_type", "version"],
        )
        max_requests = self._engine.config.max_num_seqs
        for kind, value in (
            ("waiting", waiting),
            ("context", 0),
            ("scheduled", running),
            ("max", max_requests),
            ("active", running),
        ):
            requests.add_metric([common["model"], kind, common["version"]], value)
        yield requests
        kv = GaugeMetricFamily(
            "nv_trt_llm_kv_cache_block_metrics",
            "TRT LLM KV cache block metrics",
            labels=["kv_cache_block_type", "model", "version"],
        )
        blocks_metrics: tuple[tuple[str, float], ...] = (
            ("fraction", used / blocks),
            ("tokens_per", size),
            ("used", used),
            ("free", blocks - used),
            ("max", blocks),
        )
        for kind, figure in blocks_metrics:
            kv.add_metric([kind, common["model"], common["version"]], figure)
        yield kv

    def _tgi(self) -> Iterator[Metric]:
        _, _, _, running, waiting = self._figures()
        yield from self._gauges(
            {},
            (
                ("tgi_batch_current_size", "Current batch size", running),
                ("tgi_queue_size", "Current queue size", waiting),
            ),
        )

    def _llamacpp(self) -> Iterator[Metric]:
        """llama-server's current release: busy slots and deferred requests, no KV gauge."""
        _, _, _, running, waiting = self._figures()
        yield from self._gauges(
            {},
            (
                ("llamacpp:requests_processing", "Number of requests processing", running),
                ("llamacpp:requests_deferred", "Number of requests deferred", waiting),
            ),
        )
