"""`qos-sidecar bench promo`, run for a few seconds on fast mock GPUs: the runs happen,
the same traffic goes through each, and the table, JSON and plot come out."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.bench_command import run_bench

pytestmark = pytest.mark.integration


def _promo(tmp_path, *args: str, timeout: float = 170) -> subprocess.CompletedProcess:
    return run_bench(tmp_path, "promo", *args, timeout=timeout)


@pytest.mark.timeout(180)
def test_a_short_flash_sale_runs_with_and_without_qos(tmp_path):
    figures, picture = tmp_path / "promo.json", tmp_path / "promo.png"
    result = _promo(
        tmp_path,
        "--seconds", "4", "--time-scale", "0.1", "--replicas", "1", "--timeout", "5",
        "--runs", "qos,qos-no-forecast,no-qos", "--json", str(figures), "--plot", str(picture),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| QoS | P0 |" in result.stdout and "| no QoS | P2 |" in result.stdout
    assert "[QoS]" in result.stdout  # progress while it ran
    saved = json.loads(figures.read_text())
    runs = saved["runs"]
    # Envoy's own timing of the sheds, from the gateway's access log.
    assert "QoS: Envoy timed the P2 sheds at p50" in result.stdout
    gateway_p2 = saved["gateway_shed_ms"]["p2"]
    assert 0 < gateway_p2["p50_ms"] <= gateway_p2["p99_ms"]
    assert set(runs) == {"QoS", "QoS, no forecast", "no QoS"}
    for tier in ("p0", "p1", "p2"):
        offered = runs["QoS"][tier]["offered"]
        assert offered > 0 and runs["no QoS"][tier]["offered"] == offered  # same traffic
        for run in runs.values():
            row = run[tier]
            assert row["served"] + row["shed"] + row["errors"] == row["offered"]
            assert row["within_slo"] + row["late"] == row["served"]
            assert row["shed_fast"] + row["shed_after_wait"] == row["shed"]
    # The mock GPUs' own count of their busy time, over the sale.
    for run in runs:
        assert 0 < saved["gpu_busy_share"][run] <= 1, saved["gpu_busy_share"]
    assert "the GPUs were busy" in result.stdout
    unforeseen = [line for line in result.stdout.splitlines() if line.startswith("QoS, no f")]
    assert not any("shed_queue_foreseen" in line for line in unforeseen)
    assert runs["no QoS"]["p2"]["shed"] == 0  # nothing sheds without QoS
    assert runs["QoS"]["p0"]["served"] == runs["QoS"]["p0"]["offered"]
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(180)
def test_a_short_flash_sale_with_two_pools_overloads_only_the_first(tmp_path):
    figures = tmp_path / "promo.json"
    result = _promo(
        tmp_path, "--pools", "2",
        "--seconds", "4", "--time-scale", "0.1", "--replicas", "1", "--timeout", "5",
        "--runs", "qos", "--json", str(figures),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| QoS, pool-a | P0 |" in result.stdout and "| QoS, pool-b | P2 |" in result.stdout
    runs = json.loads(figures.read_text())["runs"]
    overloaded, calm = runs["QoS, pool-a"], runs["QoS, pool-b"]
    # pool-b is offered a fifth of what pool-a is (0.5x against 2.5x its capacity).
    assert calm["p0"]["offered"] < overloaded["p0"]["offered"] / 2
    for pool in (overloaded, calm):
        assert pool["p0"]["served"] == pool["p0"]["offered"], result.stdout
    assert overloaded["p2"]["shed"] > overloaded["p2"]["offered"] / 2
    assert calm["p1"]["shed"] == 0  # the overload of pool-a sheds nothing of pool-b's P1


@pytest.mark.timeout(240)
def test_a_short_flash_sale_runs_the_same_traffic_through_litellm(tmp_path):
    # Slower mocks than above: one LiteLLM worker takes far more CPU a request than the
    # sidecar, and this machine has two cores.
    figures = tmp_path / "promo.json"
    result = _promo(
        tmp_path,
        "--seconds", "6", "--time-scale", "0.5", "--replicas", "1", "--timeout", "10",
        "--runs", "qos,litellm", "--json", str(figures), timeout=230,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "| LiteLLM | P0 |" in result.stdout
    saved = json.loads(figures.read_text())
    runs = saved["runs"]
    for tier in ("p0", "p1", "p2"):
        row = runs["LiteLLM"][tier]
        assert row["offered"] == runs["QoS"][tier]["offered"]  # the same traffic
        assert row["served"] + row["shed"] + row["errors"] == row["offered"]
    # P2's key is allowed 5 % of the capacity a minute: LiteLLM refuses the rest with 429s.
    assert runs["LiteLLM"]["p2"]["shed"] > 0
    assert "LiteLLM: shed as 429 Too Many Requests" in result.stdout
    cpu = saved["gateway_cpu_ms_per_request"]
    assert set(cpu) == {"QoS", "LiteLLM"} and all(ms > 0 for ms in cpu.values()), cpu
