"""Weighted max-min fair shares against a reference model, and Jain's index."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.config.schema import FairnessConfig
from sidecar.loops.fairness.shares import jain_index, max_min_shares
from sidecar.loops.fairness.usage import tier_fairness

tenants = st.dictionaries(
    st.text("abcdefgh", min_size=1, max_size=3),
    st.tuples(
        st.floats(0, 10_000, allow_nan=False),  # demand
        st.sampled_from([0.5, 1.0, 2.0, 3.0, 10.0]),  # weight
    ),
    min_size=1,
    max_size=8,
)


def progressive_filling(demands, weights, capacity):
    """The reference: raise every unsatisfied tenant's allocation together, in proportion
    to its weight, until it has its demand or the capacity runs out; repeat."""
    given = dict.fromkeys(demands, 0.0)
    left = capacity
    hungry = {t for t in demands if demands[t] > 0}
    while left > 1e-9 and hungry:
        total = sum(weights[t] for t in hungry)
        # The level at which the first hungry tenant is full, or the capacity is spent.
        step = min(min((demands[t] - given[t]) / weights[t] for t in hungry), left / total)
        for t in hungry:
            given[t] += step * weights[t]
        left -= step * total
        hungry = {t for t in hungry if demands[t] - given[t] > 1e-9}
    return given


@given(tenants, st.floats(0, 50_000, allow_nan=False))
def test_water_filling_matches_progressive_filling(tenants, capacity):
    demands = {t: d for t, (d, _) in tenants.items()}
    weights = {t: w for t, (_, w) in tenants.items()}
    shares = max_min_shares(demands, weights, capacity)
    reference = progressive_filling(demands, weights, capacity)
    for tenant in tenants:
        assert shares[tenant] == pytest.approx(reference[tenant], rel=1e-6, abs=1e-6)
    assert sum(shares.values()) == pytest.approx(
        min(capacity, sum(demands.values())), rel=1e-6, abs=1e-6
    )


def test_a_flood_gets_what_the_light_tenants_leave():
    shares = max_min_shares(
        {"a": 70_000, "b": 700, "c": 700, "d": 700}, dict.fromkeys("abcd", 1), 7_000
    )
    assert shares["b"] == shares["c"] == shares["d"] == 700
    assert shares["a"] == pytest.approx(4_900)


def test_weights_split_a_contended_tier():
    shares = max_min_shares({"b": 1e9, "c": 1e9}, {"b": 3, "c": 1}, 4_000)
    assert shares == {"b": pytest.approx(3_000), "c": pytest.approx(1_000)}


def test_jain_index():
    assert jain_index([1, 1, 1, 1]) == 1
    assert jain_index([1, 0, 0, 0]) == 0.25
    assert jain_index([]) is None
    assert 0.25 < jain_index([3, 1]) < 1


def test_a_tier_s_state_reads_as_rates_shares_and_an_index():
    config = FairnessConfig(window_seconds=2.0, active_seconds=5.0)
    now = 100_000.0
    state = {
        b"#weights": b"3",
        # 4 900 tokens a second served, 60 000 refused: it wants more.
        b"t:flood": f"{2 * 4_900},{2 * 60_000},{now},1".encode(),
        # Never refused, its last ask 2 s ago: decayed, and wanting no more.
        b"t:light": f"{2 * 700},0,{now - 2_000},2".encode(),
        b"t:gone": f"{2 * 700},0,{now - 6_000},1".encode(),  # quiet: not counted
    }
    fairness = tier_fairness(state, now, config, "p1", "default", 7_000)
    flood, light = fairness.tenants
    assert (flood.tenant, light.tenant) == ("flood", "light")  # most served first
    assert flood.served == pytest.approx(4_900) and flood.refused == pytest.approx(60_000)
    assert light.served == pytest.approx(700 * math.exp(-1))
    assert light.entitled == pytest.approx(light.served)  # got all it wanted
    assert flood.entitled == pytest.approx(7_000 - light.served)  # the rest is the flood's
    assert fairness.index == pytest.approx(jain_index([flood.served / flood.entitled, 1.0]))
    assert fairness.top(1) == (flood,)


def test_a_tenant_refused_while_another_takes_more_than_its_share_shows_as_unfair():
    config = FairnessConfig()
    now = 50_000.0
    state = {  # weight 1 each, both refused: 3 500 a second each would be fair
        b"t:big": f"{2 * 6_000},{2 * 9_000},{now},1".encode(),
        b"t:small": f"{2 * 1_000},{2 * 500},{now},1".encode(),
    }
    fairness = tier_fairness(state, now, config, "p1", "default", 7_000)
    assert [t.entitled for t in fairness.tenants] == [pytest.approx(3_500)] * 2
    assert fairness.index == pytest.approx(jain_index([6 / 3.5, 1 / 3.5]))
    assert fairness.index < 0.8
