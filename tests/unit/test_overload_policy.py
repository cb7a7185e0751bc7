"""Cluster load, shedding rules and hysteresis, operator modes: pure, no servers."""

from __future__ import annotations

import math

import pytest

from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode, OperatorMode
from sidecar.config.pools import resolve as resolve_pools
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.load import PodLoad, aggregate
from sidecar.loops.overload.pace import Pace
from sidecar.loops.overload.shedding import SheddingState, eviction_needed
from sidecar.refusals import Reason
from sidecar.request.admission.candidates import overload_refusal

CONFIG = QosConfig.from_partial({"fleet": {"max_concurrency": 100}})


def pod(name, usage, blocks=1000, running=0, waiting=0) -> PodLoad:
    return PodLoad(name, usage, blocks, running, waiting)


def test_free_kv_is_weighted_by_each_pods_capacity():
    load = aggregate([pod("big", 0.9, blocks=3000), pod("small", 0.1, blocks=1000)])
    assert load.free_kv_ratio == pytest.approx((3000 * 0.1 + 1000 * 0.9) / 4000)
    assert [p.pod_id for p in load.pods] == ["big", "small"]


def test_pods_without_a_block_count_weigh_as_the_median_pod():
    load = aggregate([pod("a", 0.5, 1000), pod("b", 0.5, 3000), pod("c", 1.0, 0)])
    assert load.free_kv_ratio == pytest.approx((500 + 1500 + 0) / (1000 + 3000 + 2000))
    alike = aggregate([pod("a", 0.2, 0), pod("b", 0.6, 0)])
    assert alike.free_kv_ratio == pytest.approx(0.6)


def test_in_flight_counts_running_and_waiting_and_no_pods_means_unknown():
    load = aggregate([pod("a", 0.1, running=5, waiting=2), pod("b", 0.1, running=3)])
    assert load.in_flight == 10 and load.known
    nothing = aggregate([])
    assert not nothing.known and nothing.free_kv_ratio is None


def test_a_pod_without_a_kv_figure_counts_in_flight_only():
    # TGI exposes no KV-cache gauge: the watermark is the other pods', in flight all of them.
    load = aggregate([pod("vllm", 0.9, 1000, running=4), pod("tgi", None, 0, running=6)])
    assert load.free_kv_ratio == pytest.approx(0.1) and load.in_flight == 10
    only_tgi = aggregate([pod("tgi", None, 0, running=90, waiting=5)])
    assert only_tgi.known and only_tgi.free_kv_ratio is None
    state = SheddingState()
    state.update(only_tgi, CONFIG)
    # No KV watermark to read; the in-flight rule still sheds P2 at 95 of 100.
    assert state.shedding == {Tier.P0: None, Tier.P1: None, Tier.P2: Reason.SHED_INFLIGHT}


def shedding_at(state: SheddingState, free: float, in_flight: int = 0, config=CONFIG):
    state.update(aggregate([pod("a", 1 - free, running=in_flight)]), config)
    return {tier: state.shedding[tier] for tier in Tier}


def test_kv_thresholds_shed_p2_below_15_and_p1_below_8_never_p0():
    state = SheddingState()
    assert shedding_at(state, 0.50) == {Tier.P0: None, Tier.P1: None, Tier.P2: None}
    assert shedding_at(state, 0.12) == {
        Tier.P0: None,
        Tier.P1: None,
        Tier.P2: Reason.SHED_KV_WATERMARK,
    }
    assert shedding_at(state, 0.05) == {
        Tier.P0: None,
        Tier.P1: Reason.SHED_KV_WATERMARK,
        Tier.P2: Reason.SHED_KV_WATERMARK,
    }
    assert shedding_at(state, 0.0)[Tier.P0] is None


def test_a_shed_tier_returns_only_past_the_hysteresis_margin():
    state = SheddingState()
    assert shedding_at(state, 0.149)[Tier.P2] is Reason.SHED_KV_WATERMARK
    assert shedding_at(state, 0.16)[Tier.P2] is Reason.SHED_KV_WATERMARK  # inside 15 %+2
    assert shedding_at(state, 0.169)[Tier.P2] is Reason.SHED_KV_WATERMARK
    assert shedding_at(state, 0.171)[Tier.P2] is None
    assert shedding_at(state, 0.16)[Tier.P2] is None  # not shedding: 16 % is fine again


def test_hysteresis_holds_around_the_in_flight_limit_too():
    state = SheddingState()
    assert shedding_at(state, 0.9, in_flight=81)[Tier.P2] is Reason.SHED_INFLIGHT
    assert shedding_at(state, 0.9, in_flight=79)[Tier.P2] is Reason.SHED_INFLIGHT
    assert shedding_at(state, 0.9, in_flight=77)[Tier.P2] is None
    assert shedding_at(state, 0.9, in_flight=80)[Tier.P2] is None  # not above 80 %


def test_at_the_hard_maximum_only_the_in_flight_rule_sheds_the_queue_holds_the_rest():
    state = SheddingState()
    assert shedding_at(state, 0.9, in_flight=100) == {
        Tier.P0: None,
        Tier.P1: None,
        Tier.P2: Reason.SHED_INFLIGHT,
    }


def test_the_gateways_own_in_flight_count_counts_when_higher():
    state = SheddingState()
    state.update(aggregate([pod("a", 0.1, running=10)]), CONFIG, gateway_in_flight=85)
    assert state.shedding[Tier.P2] is Reason.SHED_INFLIGHT
    state.update(aggregate([pod("a", 0.1, running=85)]), CONFIG, gateway_in_flight=10)
    assert state.shedding[Tier.P2] is Reason.SHED_INFLIGHT


def test_without_reports_the_configured_tiers_are_shed():
    state = SheddingState()
    state.update(aggregate([]), CONFIG)
    assert state.shedding == {Tier.P0: None, Tier.P1: None, Tier.P2: Reason.SHED_NO_REPORTS}
    strict = QosConfig.from_partial({"overload": {"shed_without_reports": ["p1", "p2"]}})
    state.update(aggregate([]), strict)
    assert state.shedding[Tier.P1] is Reason.SHED_NO_REPORTS


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (OperatorMode(), {Tier.P0: None, Tier.P1: None, Tier.P2: None}),
        (
            OperatorMode(mode=Mode.CORE_ONLY),
            {Tier.P0: None, Tier.P1: Reason.SHED_CORE_ONLY, Tier.P2: Reason.SHED_CORE_ONLY},
        ),
        (
            OperatorMode(force_shed=frozenset({Tier.P1})),
            {Tier.P0: None, Tier.P1: Reason.SHED_FORCED, Tier.P2: None},
        ),
    ],
)
def test_operator_modes(mode, expected):
    state = SheddingState()
    shedding_at(state, 0.9)
    snapshot = Snapshot(1, CONFIG, {}, mode)
    assert {tier: overload_refusal(tier, snapshot, state) for tier in Tier} == expected


def test_a_shed_tier_is_foreseen_back_once_its_share_of_the_work_has_ended():
    state = SheddingState()
    # 5 % free, P2 back at 17 % (15 % + 2): 12 points of the 95 in use must end, that
    # share of the requests in flight, each held 4 s on average, nothing starting.
    quiet = Pace(held={Tier.P2: 40}, holds={Tier.P2: 4.0}, taken={})
    state.update(aggregate([pod("a", 0.95, running=40)]), CONFIG, pace=quiet)
    assert state.shedding[Tier.P2] is Reason.SHED_KV_WATERMARK
    # 40 exp(-s / 4) = 40 (1 - share)
    assert state.recovery[Tier.P2] == pytest.approx(-4.0 * math.log(1 - 0.12 / 0.95), rel=0.02)
    p1_share = (0.08 + 0.02 - 0.05) / 0.95
    assert state.recovery[Tier.P1] == pytest.approx(-4.0 * math.log(1 - p1_share), rel=0.02)
    assert state.recovery[Tier.P0] is None  # not shed
    # In flight: 90 of 100, P2 back at 78: 12 of the 90 must end.
    state.update(aggregate([pod("a", 0.5, running=90)]), CONFIG, pace=quiet)
    assert state.shedding[Tier.P2] is Reason.SHED_INFLIGHT
    assert state.recovery[Tier.P2] == pytest.approx(-4.0 * math.log(1 - 12 / 90), rel=0.02)
    # No pace known yet: nothing foreseen.
    state.update(aggregate([pod("a", 0.5, running=90)]), CONFIG)
    assert state.recovery[Tier.P2] is None


def test_the_tiers_still_admitted_slow_a_shed_tier_s_comeback():
    state = SheddingState()
    # P0 and P1, still admitted, keep 2 x 1 s + 4 x 2 s = 10 slots in flight; P2's own
    # 20 go at 5 s each and none start.
    held = {Tier.P0: 2, Tier.P1: 8, Tier.P2: 20}
    holds = {Tier.P0: 1.0, Tier.P1: 2.0, Tier.P2: 5.0}
    busy = Pace(held, holds, taken={Tier.P0: 2.0, Tier.P1: 4.0, Tier.P2: 3.0})
    state.update(aggregate([pod("a", 0.5, running=90)]), CONFIG, pace=busy)
    assert state.shedding[Tier.P2] is Reason.SHED_INFLIGHT
    # 10 + 20 exp(-s / 5) = 30 (1 - 12 / 90)
    expected = -5.0 * math.log((30 * (1 - 12 / 90) - 10) / 20)
    assert state.recovery[Tier.P2] == pytest.approx(expected, rel=0.02)
    # The tiers above start as much as must remain: the excess is not foreseen to go.
    flooded = Pace(held, holds, taken={Tier.P0: 4.0, Tier.P1: 12.0})
    state.update(aggregate([pod("a", 0.5, running=90)]), CONFIG, pace=flooded)
    assert state.shedding[Tier.P2] is Reason.SHED_INFLIGHT
    assert state.recovery[Tier.P2] is None


def test_a_burst_above_is_foreseen_gone_in_its_own_time():
    """Short requests of a tier above that has stopped arriving end in about their own
    hold; the shed tier's long ones would take far longer alone."""
    state = SheddingState()
    burst = Pace({Tier.P0: 40, Tier.P2: 50}, {Tier.P0: 0.5, Tier.P2: 8.0}, taken={})
    state.update(aggregate([pod("a", 0.5, running=90)]), CONFIG, pace=burst)
    alone = Pace({Tier.P2: 90}, {Tier.P2: 8.0}, taken={})
    recovery = state.recovery[Tier.P2]
    assert recovery is not None and recovery < 0.5 * 2
    state.update(aggregate([pod("a", 0.5, running=90)]), CONFIG, pace=alone)
    assert state.recovery[Tier.P2] is not None and state.recovery[Tier.P2] > 2 * recovery


def test_no_comeback_is_foreseen_without_a_hold_known():
    unknown = Pace({Tier.P2: 10}, {Tier.P2: None}, taken={})
    assert unknown.seconds(0.5, ()) is None
    # A tier none of whose slots ended lately holds for as long as the others.
    mixed = Pace({Tier.P1: 10, Tier.P2: 10}, {Tier.P1: 2.0, Tier.P2: None}, taken={})
    assert mixed.seconds(0.5, ()) == pytest.approx(2.0 * math.log(2), rel=0.02)


def test_streams_are_ended_only_below_the_line_and_while_a_tier_above_is_shed_for_kv():
    config = QosConfig.from_partial(
        {"fleet": {"max_concurrency": 100}, "overload": {"evict_below_free_kv": 0.05}}
    )
    pool = resolve_pools(config).default
    state = SheddingState()
    state.update(aggregate([pod("a", 0.97, blocks=1000)]), config, pool=pool)
    # 3 % free, P1 shed below 8 %: back to 5 % + 2 of hysteresis, 40 of 1 000 blocks.
    assert state.shedding[Tier.P1] is Reason.SHED_KV_WATERMARK
    assert eviction_needed(state, pool, config) == pytest.approx(40)
    state.update(aggregate([pod("a", 0.94, blocks=1000)]), config, pool=pool)
    assert eviction_needed(state, pool, config) == 0  # above the line
    off = QosConfig.from_partial({"fleet": {"max_concurrency": 100}})
    state.update(aggregate([pod("a", 0.99, blocks=1000)]), off, pool=pool)
    assert eviction_needed(state, pool, off) == 0  # eviction off
    # Nobody above shed for the memory (P1 has no KV watermark here): nothing ended.
    unshed = QosConfig.from_partial(
        {
            "overload": {"evict_below_free_kv": 0.05},
            "tiers": {"p1": {"shed_below_free_kv": None}},
        }
    )
    unshed_pool = resolve_pools(unshed).default
    state.update(aggregate([pod("a", 0.99, blocks=1000)]), unshed, pool=unshed_pool)
    assert eviction_needed(state, unshed_pool, unshed) == 0
