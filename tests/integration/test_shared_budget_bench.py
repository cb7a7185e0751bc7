"""bench/shared_budget.py at a small size: gateways sharing one Redis, tenants' clients
on all of them, every answer counted and each tenant's admissions held to its budget."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.bench_command import run_bench

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench" / "shared_budget.py"


def _bench(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return run_bench(tmp_path, str(BENCH), *args, timeout=230)


@pytest.mark.timeout(240)
def test_two_gateways_hold_their_tenants_to_one_budget(tmp_path):
    figures = tmp_path / "shared.json"
    result = _bench(
        tmp_path, "--gateways", "2", "--processes", "1",
        "--clients", "8", "--tenants", "2", "--tenant-rps", "4", "--seconds", "3",
        "--modes", "headroom,exact", "--json", str(figures),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| headroom |" in result.stdout and "| exact |" in result.stdout
    saved = json.loads(figures.read_text())
    for mode in ("headroom", "exact"):
        for tenant in saved[mode]["tenants"]:
            assert tenant["requests"] > 0 and tenant["other_statuses"] == {}
            # Far more was asked than allowed; what was admitted stays near the budget
            # (a loaded machine may switch budgets local for moments: under, not over).
            assert tenant["admitted_tokens"] <= 1.25 * tenant["allowed_tokens"], tenant


@pytest.mark.timeout(240)
def test_the_same_tenants_through_litellm_proxies_meet_its_limiter(tmp_path):
    figures = tmp_path / "shared.json"
    result = _bench(
        tmp_path, "--gateways", "2", "--processes", "1",
        "--clients", "8", "--tenants", "2", "--tenant-rps", "0.5",
        "--modes", "litellm", "--litellm-seconds", "4", "--json", str(figures),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "| litellm |" in result.stdout
    for tenant in json.loads(figures.read_text())["litellm"]["tenants"]:
        assert tenant["other_statuses"] == {}, tenant  # each answered or refused (429)
        # A key allowed 30 requests a minute; its clients asked for far more and were
        # refused once its limiter counted them in Redis.
        assert tenant["allowed_tokens"] == 30 * 91
        assert 0 < tenant["admitted_tokens"] < tenant["requests"] * 91, tenant
