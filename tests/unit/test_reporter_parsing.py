from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.loops.dialects import MetricsUnreadable
from sidecar.loops.dialects.report import load_report
from sidecar.operator.reporter import Settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_vllm_033_with_two_data_parallel_engines():
    report = load_report(fixture("vllm-0.33-dp2.prom"), "pod-dp", "priority")
    # Usage averaged over the engines, requests summed, the pod's blocks counted once
    # (each engine's cache_config_info repeats the pod's sum: 2 x 27136).
    assert report.kv_cache_usage == pytest.approx(0.30)
    assert (report.num_requests_running, report.num_requests_waiting) == (20, 4)
    assert report.kv_blocks_total == 54_272
    assert report.kv_block_size == 16
    assert report.model == "Qwen/Qwen2.5-7B-Instruct"
    assert report.scheduling_policy == "priority"
    # What its queue limits refused, over both reasons (vLLM 0.32 on).
    assert report.admission_rejections == 7


def test_vllm_06_legacy_names():
    report = load_report(fixture("vllm-0.6-legacy.prom"), "pod-old")
    assert report.kv_cache_usage == pytest.approx(0.8731)
    assert (report.num_requests_running, report.num_requests_waiting) == (24, 6)
    assert report.kv_blocks_total == 27_987
    assert report.kv_block_size == 16
    assert report.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert report.scheduling_policy == ""  # unknown unless the operator says
    assert report.admission_rejections == 0  # no queue limits before 0.32


def test_a_vllm_without_stats_is_named_as_the_likely_cause():
    # vLLM started with --disable-log-stats: its /metrics has no vllm: series at all.
    text = "# TYPE python_gc_objects_collected_total counter\npython_gc_objects_collected_total 9\n"
    with pytest.raises(MetricsUnreadable, match="--disable-log-stats"):
        load_report(text, "p")


def test_blocks_not_yet_known_count_as_unknown():
    text = fixture("vllm-0.33-dp2.prom").replace('num_gpu_blocks="54272"', 'num_gpu_blocks="None"')
    assert load_report(text, "p").kv_blocks_total == 0


def test_the_scheduling_policy_setting_takes_only_what_vllm_knows():
    assert Settings(scheduling_policy="fcfs").scheduling_policy == "fcfs"
    with pytest.raises(SystemExit, match="fcfs, priority"):
        Settings(scheduling_policy="lottery")


V1 = """\
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="8192"} 1.0
"""

LEGACY = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2.0
"""


def test_current_metric_names():
    report = load_report(V1, "pod-a")
    assert report.pod_id == "pod-a"
    assert report.kv_cache_usage == pytest.approx(0.42)
    assert (report.num_requests_running, report.num_requests_waiting) == (7, 3)
    assert report.kv_blocks_total == 8192
    assert report.observed_unix_ms > 0


def test_legacy_metric_name_and_missing_figures():
    report = load_report(LEGACY, "pod-b")
    assert report.kv_cache_usage == pytest.approx(0.9)
    assert (report.num_requests_waiting, report.kv_blocks_total) == (0, 0)


def test_the_new_name_wins_when_both_are_there():
    both = V1 + "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.99\n"
    assert load_report(both, "p").kv_cache_usage == pytest.approx(0.42)


def test_text_without_kv_metrics_is_refused():
    with pytest.raises(MetricsUnreadable, match="kv_cache_usage_perc"):
        load_report("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n", "p")


def test_pod_id_defaults_to_host_and_port():
    assert Settings(vllm_url="http://10.0.0.5:8123").resolved_pod_id().endswith(":8123")
    assert Settings(pod_id="vllm-0").resolved_pod_id() == "vllm-0"
