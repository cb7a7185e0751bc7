"""`qos-sidecar bench mix` on fast mock GPUs: the three runs happen on the same traffic,
and the interactive bursts keep their first tokens with QoS, not without."""

from __future__ import annotations

import json

import pytest

from tests.bench_command import run_bench

pytestmark = pytest.mark.integration


@pytest.mark.timeout(240)
def test_interactive_bursts_beside_a_batch_backlog(tmp_path):
    figures = tmp_path / "mix.json"
    result = run_bench(
        tmp_path, "mix", "--engine", "mock", "--time-scale", "0.2", "--seconds", "6",
        "--burst-every", "1.5", "--json", str(figures), timeout=230,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| run | interactive TTFT p50 |" in result.stdout
    saved = json.loads(figures.read_text())
    runs = saved["runs"]
    alone, unprotected, protected = runs["interactive alone, no QoS"], runs["no QoS"], runs["QoS"]
    assert runs["interactive alone, QoS"]["p0"]["offered"] == alone["p0"]["offered"]
    assert alone["p0"]["offered"] == unprotected["p0"]["offered"] == protected["p0"]["offered"]
    assert alone["p2"]["offered"] == 0 < unprotected["p2"]["offered"] == protected["p2"]["offered"]
    for run in runs.values():
        for row in run.values():
            assert row["served"] + row["shed"] + row["errors"] == row["offered"]
    assert protected["p0"]["served"] == protected["p0"]["offered"]
    ttft = saved["interactive_ttft"]
    assert ttft["interactive alone, QoS"]["p99_ratio"] == 1.0
    # The batch backlog delays the bursts by seconds without QoS, not with it.
    assert ttft["QoS"]["p99_ms"] < ttft["no QoS"]["p99_ms"], ttft
