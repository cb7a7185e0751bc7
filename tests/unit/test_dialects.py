"""Each model server's /metrics, real-shaped (tests/fixtures/metrics/, each naming the
release it was checked against), read as the pod's load."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from sidecar.loops.dialects import DIALECTS, MetricsUnreadable, PodMetrics, read
from sidecar.tooling.mockvllm.dialect_metrics import DialectCollector
from sidecar.tooling.mockvllm.engine import Engine, EngineConfig
from sidecar.tooling.mockvllm.metrics import EngineCollector

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"

EXPECTED = {
    # Usage averaged over the engines, requests summed, the pod's blocks counted once.
    # And what its queue limits refused, over both reasons.
    "vllm-0.33-dp2.prom": PodMetrics(
        "vllm", 0.30, 54_272, 16, 20, 4, "Qwen/Qwen2.5-7B-Instruct", admission_rejections=7
    ),
    # Two data-parallel ranks summed, their tensor-parallel ranks taken once; capacity in
    # tokens, as pages of one token.
    "sglang-0.5-dp2.prom": PodMetrics("sglang", 0.30, 400_000, 1, 24, 5, "Qwen/Qwen3-32B"),
    "trtllm-serve-2026.prom": PodMetrics(
        "trtllm", 0.35, 12_000, 32, 18, 7, "meta-llama/Llama-3.1-8B-Instruct"
    ),
    # No waiting series: waiting = active - scheduled.
    "triton-trtllm-0.17.prom": PodMetrics("triton", 3739 / 6239, 6239, 64, 22, 8, "tensorrt_llm"),
    "triton-trtllm-1.0.prom": PodMetrics("triton", 3743 / 6239, 6239, 64, 22, 5, "tensorrt_llm"),
    "tgi-3.prom": PodMetrics("tgi", None, 0, 0, 12, 4),
    # Busy slots and deferred requests; the current release has no KV gauge.
    "llamacpp-b11434.prom": PodMetrics("llamacpp", None, 0, 0, 4, 2),
    # The release before had one: cells in use over the context.
    "llamacpp-py0.3.9.prom": PodMetrics("llamacpp", 0.486511, 0, 0, 4, 2),
    # Idle, its slots keep their last prompts' cells: free, not 28 % used.
    "llamacpp-py0.3.9-idle.prom": PodMetrics("llamacpp", 0.0, 0, 0, 0, 0),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_fixture_reads_as_the_pod_s_load(name):
    text = (FIXTURES / name).read_text()
    found = read(text)  # the dialect found from the exposition itself
    expected = EXPECTED[name]
    assert found.dialect == expected.dialect
    if expected.kv_usage is None:
        assert found.kv_usage is None
    else:
        assert found.kv_usage == pytest.approx(expected.kv_usage)
    assert (found.kv_blocks_total, found.kv_block_size) == (
        expected.kv_blocks_total,
        expected.kv_block_size,
    )
    assert (found.running, found.waiting, found.model, found.admission_rejections) == (
        expected.running,
        expected.waiting,
        expected.model,
        expected.admission_rejections,
    )
    assert read(text, expected.dialect) == found  # forced, the same


def test_every_dialect_has_a_fixture():
    assert {p.dialect for p in EXPECTED.values()} == set(DIALECTS)


def test_a_forced_dialect_that_is_not_spoken_is_refused_by_name():
    text = (FIXTURES / "tgi-3.prom").read_text()
    with pytest.raises(MetricsUnreadable, match="sglang:token_usage"):
        read(text, "sglang")


def test_trtllm_serve_without_iteration_stats_names_the_setting():
    text = "# TYPE trtllm_request_success_total counter\ntrtllm_request_success_total 3\n"
    with pytest.raises(MetricsUnreadable, match="enable_iter_perf_stats"):
        read(text)


def test_sglang_pages_from_its_cache_config():
    text = (FIXTURES / "sglang-0.5-dp2.prom").read_text() + (
        "# TYPE sglang:cache_config_info gauge\n"
        'sglang:cache_config_info{dp_rank="0",model_name="Qwen/Qwen3-32B",num_pages="3125",'
        'page_size="64",tp_rank="0"} 1\n'
        'sglang:cache_config_info{dp_rank="1",model_name="Qwen/Qwen3-32B",num_pages="3125",'
        'page_size="64",tp_rank="0"} 1\n'
    )
    found = read(text)
    assert (found.kv_blocks_total, found.kv_block_size) == (6250, 64)


def test_triton_sums_several_tensorrt_llm_models():
    one = (FIXTURES / "triton-trtllm-1.0.prom").read_text()
    other = one.replace('model="tensorrt_llm"', 'model="tensorrt_llm_b"').replace(
        'kv_cache_block_type="used",model="tensorrt_llm_b",version="1"} 3743',
        'kv_cache_block_type="used",model="tensorrt_llm_b",version="1"} 0',
    )
    lines = [line for line in other.splitlines() if not line.startswith("#")]
    found = read(one + "\n".join(lines) + "\n")
    assert found.kv_usage == pytest.approx(3743 / (2 * 6239))
    assert (found.kv_blocks_total, found.running, found.waiting) == (2 * 6239, 44, 10)
    assert found.model == ""  # two models: none named


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_the_mock_speaks_each_dialect_as_its_reader_reads_it(dialect):
    engine = Engine(EngineConfig(kv_cache_tokens=16_000, block_size=16))
    for _ in range(3):
        engine.submit(prompt_tokens=1_000, max_tokens=8)
    engine.running.append(engine.waiting.pop(0))  # one running, holding 63 blocks
    engine.running[0].blocks = 63
    engine.free_blocks -= 63
    registry = CollectorRegistry()
    if dialect == "vllm":
        registry.register(EngineCollector(engine, "m"))
    else:
        registry.register(DialectCollector(engine, "m", dialect))
    found = read(generate_latest(registry).decode())
    assert found.dialect == dialect
    assert (found.running, found.waiting) == (1, 2)
    if dialect in ("tgi", "llamacpp"):  # llama-server's current release: no KV gauge
        assert found.kv_usage is None
    else:
        assert found.kv_usage == pytest.approx(63 / 1000)
        assert found.kv_blocks_total * found.kv_block_size == 16_000
