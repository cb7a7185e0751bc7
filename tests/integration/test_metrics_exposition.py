"""The sidecar's /metrics as Prometheus tooling reads it."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

pytestmark = pytest.mark.integration

EXPECTED = (
    "qos_decisions_total",
    "qos_decision_duration_seconds",
    "qos_queue_wait_seconds",
    "qos_cluster_free_kv_ratio",
    "qos_pod_report_age_seconds",
    "qos_tier_rate_tokens_per_second",
    "qos_tier_share_ratio",
    "qos_slo_compliance_ratio",
    "qos_controller_leader",
    "qos_requests_in_flight",
    "qos_queue_waiting",
    "qos_overload_shedding",
    "qos_redis_errors_total",
    "qos_exchange_ends_total",
    "qos_config_version",
)


def test_promtool_accepts_the_exposition_after_real_traffic(stack):
    for stream in (False, True):
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": stream}
        request = urllib.request.Request(
            f"{stack.envoy_url}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
    with urllib.request.urlopen(f"{stack.sidecar_admin_url}/metrics", timeout=5) as response:
        exposition = response.read()
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=exposition, capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == b"" and result.stderr.strip() == b""  # no lint warnings
    text = exposition.decode()
    missing = [
        name for name in EXPECTED if f"\n{name}" not in text and f"# TYPE {name}" not in text
    ]
    assert missing == []


def test_promtool_would_catch_a_bad_name():
    """The check above can fail: promtool flags a counter without _total."""
    bad = b"# HELP requests Requests.\n# TYPE requests counter\nrequests 1\n"
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=bad, capture_output=True, timeout=30
    )
    assert result.returncode != 0 or result.stdout or result.stderr
