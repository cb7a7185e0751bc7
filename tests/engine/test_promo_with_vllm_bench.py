"""`qos-sidecar bench promo --load-tool vllm`, run for a few seconds on one mock GPU: the
fleet is measured by vLLM's own `vllm bench serve`, one process of it per tier offers the
sale on ShareGPT's prompts, and its figures come out beside this harness's reading of the
same requests, where a fallback is never served."""

from __future__ import annotations

import json

import pytest

from sidecar.tooling.engine import workspace
from tests.bench_command import run_bench

pytestmark = [pytest.mark.engine]


@pytest.mark.timeout(600)
def test_the_sale_offered_by_vllm_bench_serve_reports_both_readings(tmp_path):
    figures = tmp_path / "promo.json"
    result = run_bench(
        tmp_path, "promo", "--load-tool", "vllm", "--seconds", "4", "--replicas", "1",
        "--runs", "qos,no-qos", "--json", str(figures),
        timeout=580, env={"QOS_ENGINE_VENV": str(workspace.venv())},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "they serve" in result.stdout and "requests/s of it" in result.stdout
    saved = json.loads(figures.read_text())
    tool, ours = saved["load_tool"], saved["runs"]
    assert set(tool) == set(ours) == {"QoS", "no QoS"}
    for run in ours:
        for tier in ("p0", "p1", "p2"):
            mine, its = ours[run][tier], tool[run][tier]
            # Every request the tool sent is read once; what it counts completed, this
            # harness counts served or shed (a fallback is a well-formed answer).
            assert mine["offered"] == its["completed"] + its["failed"] > 0
            assert mine["served"] + mine["shed"] + mine["errors"] == mine["offered"]
            assert mine["within_slo"] <= its["goodput"]
    assert ours["no QoS"]["p2"]["shed"] == 0  # no gateway to shed
    assert ours["QoS"]["p0"]["served"] == ours["QoS"]["p0"]["offered"]
    assert "| QoS | P0 |" in result.stdout and "tool: goodput" in result.stdout
