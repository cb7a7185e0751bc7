from __future__ import annotations

import pytest

from sidecar.reporter import MetricsUnreadable, Settings, parse_vllm_metrics

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
    report = parse_vllm_metrics(V1, "pod-a")
    assert report.pod_id == "pod-a"
    assert report.kv_cache_usage == pytest.approx(0.42)
    assert (report.num_requests_running, report.num_requests_waiting) == (7, 3)
    assert report.kv_blocks_total == 8192
    assert report.observed_unix_ms > 0


def test_legacy_metric_name_and_missing_figures():
    report = parse_vllm_metrics(LEGACY, "pod-b")
    assert report.kv_cache_usage == pytest.approx(0.9)
    assert (report.num_requests_waiting, report.kv_blocks_total) == (0, 0)


def test_the_new_name_wins_when_both_are_there():
    both = V1 + "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.99\n"
    assert parse_vllm_metrics(both, "p").kv_cache_usage == pytest.approx(0.42)


def test_text_without_kv_metrics_is_refused():
    with pytest.raises(MetricsUnreadable):
        parse_vllm_metrics("# TYPE up gauge\nup 1\n", "p")


def test_pod_id_defaults_to_host_and_port():
    assert Settings(vllm_url="http://10.0.0.5:8123").resolved_pod_id().endswith(":8123")
    assert Settings(pod_id="vllm-0").resolved_pod_id() == "vllm-0"
