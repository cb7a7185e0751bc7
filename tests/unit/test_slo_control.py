"""The SLO controller against a plant model: deterministic, no servers.

The plant: a GPU fleet of capacity 1. P0 is never shed, so it loads the fleet with its
whole demand; P1 and P2 load it with as much of their demand as their budget admits
(share x the configured capacity). P0 meets its SLO while the fleet is below 85 %
busy; past that its compliance falls a point per point of load.
"""

from __future__ import annotations

import itertools

import pytest

from sidecar.config.base import Tier
from sidecar.config.schema import QosConfig
from sidecar.config.slo_config import ControllerConfig
from sidecar.loops.slo.control import Compliance, adjust

CONFIG = ControllerConfig()
BASE = {tier: QosConfig().tiers[tier].share for tier in Tier}


def p0_compliance(shares, demand, budget_capacity=1.0) -> float:
    load = demand[Tier.P0] + sum(
        min(demand[t], shares[t] * budget_capacity) for t in (Tier.P1, Tier.P2)
    )
    return min(0.9995, max(0.0, 0.9995 - max(0.0, load - 0.85)))


def run(shares, demand, seconds, start=0.0, last=None, history=None):
    """Drive the controller once a second; returns (shares, last adjustment time)."""
    for second in range(int(seconds)):
        now = start + second
        ratio = p0_compliance(shares, demand)
        step = adjust(shares, Compliance(ratio, 1000), CONFIG, now, last)
        if step is not None:
            shares, last = step.shares, now
            if history is not None:
                history.append((now, shares, step.reason))
        for tier in Tier:
            assert CONFIG.floors[tier] - 1e-9 <= shares[tier] <= CONFIG.ceilings[tier] + 1e-9
        assert sum(shares.values()) == pytest.approx(1.0)
    return shares, last


def test_calm_load_gives_p0_rate_away_down_to_its_floor_then_stops():
    calm = {Tier.P0: 0.2, Tier.P1: 0.2, Tier.P2: 0.05}
    history = []
    shares, _ = run(dict(BASE), calm, 600, history=history)
    assert shares[Tier.P0] < BASE[Tier.P0]
    assert all(
        when >= prev + CONFIG.cooldown_seconds
        for (prev, _, _), (when, _, _) in itertools.pairwise(history)
    )
    assert "to P1/P2" in history[0][2]


def test_a_step_overload_converges_in_few_adjustments_and_then_holds_still():
    calm = {Tier.P0: 0.3, Tier.P1: 0.3, Tier.P2: 0.1}
    shares, last = run(dict(BASE), calm, 300)  # the controller handed P0's slack out
    assert p0_compliance(shares, calm) >= CONFIG.give_above or shares[Tier.P0] == pytest.approx(
        CONFIG.floors[Tier.P0]
    )

    surge = {Tier.P0: 0.3, Tier.P1: 0.9, Tier.P2: 0.6}  # flash sale: P1/P2 triple
    assert p0_compliance(shares, surge) < CONFIG.take_below
    history = []
    shares, last = run(shares, surge, 300, start=300, last=last, history=history)
    recovered_at = next(
        i for i, (_, s, _) in enumerate(history) if p0_compliance(s, surge) >= CONFIG.take_below
    )
    assert recovered_at + 1 <= 10  # bounded number of adjustments
    assert all("back to P0" in reason for _, _, reason in history[: recovered_at + 1])

    # Steady state: over the last few minutes it moves at most one step back and forth.
    settled = []
    shares, last = run(shares, surge, 300, start=600, last=last, history=settled)
    states = {tuple(round(s[t], 9) for t in Tier) for _, s, _ in settled}
    assert len(states) <= 2
    assert shares[Tier.P1] >= CONFIG.floors[Tier.P1] - 1e-9  # P1's guarantee holds


def test_nothing_moves_in_the_dead_band_during_cooldown_or_without_samples():
    shares = dict(BASE)
    assert adjust(shares, Compliance(0.97, 1000), CONFIG, 100.0, None) is None
    assert adjust(shares, Compliance(0.5, 1000), CONFIG, 100.0, 97.0) is None  # cooldown
    assert adjust(shares, Compliance(None, 3), CONFIG, 100.0, None) is None
    taken = adjust(shares, Compliance(0.5, 1000), CONFIG, 100.0, 90.0)
    assert taken.shares[Tier.P0] > shares[Tier.P0]


def test_p1_is_never_taken_below_its_minimum_guarantee():
    shares = {Tier.P0: 0.60, Tier.P1: 0.36, Tier.P2: 0.04}
    for second in range(0, 200, 5):
        step = adjust(shares, Compliance(0.5, 1000), CONFIG, float(second), None)
        if step is None:
            break
        shares = step.shares
    assert shares[Tier.P1] == pytest.approx(CONFIG.floors[Tier.P1])
    assert shares[Tier.P2] == pytest.approx(CONFIG.floors[Tier.P2])
    assert sum(shares.values()) == pytest.approx(1.0)
