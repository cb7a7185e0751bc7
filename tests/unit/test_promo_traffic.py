"""The flash-sale plan and its report: pure functions, no servers."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from sidecar.tooling.benchmarks import report
from sidecar.tooling.benchmarks.load import ERROR, SERVED, SHED, Outcome
from sidecar.tooling.benchmarks.prompt_estimate import estimate_prompt_tokens
from sidecar.tooling.benchmarks.traffic import (
    CALLERS,
    capacity_rps,
    chat_body,
    mean_prompt_tokens,
    plan,
)


def test_the_plan_is_fixed_by_its_seed_and_follows_the_mix_and_rate():
    first, again, other = plan(30, 60, seed=1), plan(30, 60, seed=1), plan(30, 60, seed=2)
    assert first == again and first != other
    assert 0.9 * 1800 < len(first) < 1.1 * 1800  # Poisson arrivals at 30/s for 60 s
    assert all(b.at >= a.at for a, b in itertools.pairwise(first))
    shares = Counter(r.caller.tier for r in first)
    for caller in CALLERS:
        assert shares[caller.tier] / len(first) == pytest.approx(caller.share, abs=0.04)
    batch = [r.prompt_tokens for r in first if r.caller.tier == "p2"]
    assert sum(t >= 20_000 for t in batch) / len(batch) == pytest.approx(0.10, abs=0.04)
    assert max(r.prompt_tokens for r in first if r.caller.tier == "p0") <= 1_200


def test_capacity_follows_the_mean_prompt():
    assert mean_prompt_tokens() == pytest.approx(sum(c.share * c.mean_prompt() for c in CALLERS))
    assert capacity_rps(2 * mean_prompt_tokens()) == pytest.approx(2.0)


def test_the_body_costs_the_planned_prompt_tokens():
    for request in plan(20, 5, seed=3):
        body = chat_body(request)
        assert estimate_prompt_tokens(body) == request.prompt_tokens
        assert body["stream"] and body["max_tokens"] == request.caller.max_tokens


def outcome(tier, result, at=0.0, seconds=0.01, ttft=None, tpot=None) -> Outcome:
    return Outcome(tier, at, result, "", seconds, ttft, tpot)


def test_the_summary_counts_outcomes_and_takes_percentiles_per_tier():
    outcomes = [outcome("p0", SERVED, ttft=t / 1000, tpot=0.02) for t in range(1, 101)]
    outcomes += [outcome("p2", SHED, seconds=0.002)] * 3 + [outcome("p2", ERROR)]
    outcomes += [outcome("p2", SHED, seconds=2.0)]
    summary = report.summarize(outcomes, {"p0": 60, "p1": 3000, "p2": 10_000})
    p0, p2 = summary["p0"], summary["p2"]
    assert (p0["offered"], p0["served"], p0["shed"], p0["errors"]) == (100, 100, 0, 0)
    assert (p0["within_slo"], p0["late"]) == (60, 40)  # first tokens after 1..100 ms
    assert p0["ttft_p50_ms"] == pytest.approx(50) and p0["ttft_p99_ms"] == pytest.approx(99)
    assert p0["shed_p99_ms"] is None
    assert (p2["offered"], p2["shed"], p2["errors"]) == (5, 4, 1)
    assert (p2["shed_fast"], p2["shed_after_wait"]) == (3, 1)
    assert p2["shed_p50_ms"] == pytest.approx(2.0) and p2["ttft_p50_ms"] is None
    table = report.table({"QoS": summary})
    assert "| QoS | P0 | 100 | 100 | 60 | 40 | 0 | 0 | 0 | 50 ms | 99 ms |" in table
    assert table.count("\n") == 3  # header, rule, the two tiers offered anything
    assert "| QoS | P1 |" not in table
    assert report.summarize(outcomes)["p0"]["within_slo"] is None  # no targets given


def test_the_timeline_bins_by_planned_start():
    outcomes = [
        outcome("p0", SERVED, at=0.5, ttft=0.1),
        outcome("p0", SERVED, at=1.5, ttft=0.3),
        outcome("p1", SHED, at=1.2),
        outcome("p2", ERROR, at=2.9),
    ]
    series = report.timeline(outcomes, seconds=3)
    assert series["t"] == [0, 1, 2]
    assert series["p0_served"] == [1, 1, 0] and series["p1_shed"] == [0, 1, 0]
    assert series["p2_error"] == [0, 0, 1]
    assert series["p0_ttft_p99_ms"] == [pytest.approx(100), pytest.approx(300), None]
