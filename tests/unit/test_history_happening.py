"""The page's "what is happening" line and its events: which tiers are shed, why and
since when, from the window's seconds. Pure."""

from __future__ import annotations

from sidecar.config.audit import AuditEntry
from sidecar.config.base import Tier
from sidecar.config.pools import DEFAULT_POOL
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.operator.history import page
from sidecar.operator.history.happening import GAP_SECONDS, WORDS, happening
from sidecar.operator.history.window import SECONDS, Window
from sidecar.refusals import Reason

NOW = 2_000_000
LINES = page.lines(Snapshot(1, QosConfig()))


def window_of(seconds: dict[int, dict[str, str]]) -> dict:
    window = Window()
    window.advance(NOW)
    for second, fields in seconds.items():
        window.merge(second, fields)
    return window.series()


def test_nothing_shed_says_so():
    series = window_of({NOW: {"d|default|p2|admit": "9", "g|mode": "normal"}})
    found = happening(series, LINES)
    assert found["shed"] == [] and found["mode"] == "normal" and found["mode_since"] == NOW


def test_a_tier_shed_names_its_main_reason_with_the_figures_and_when_it_began():
    p2_line = LINES[DEFAULT_POOL]["p2"]["shed_below_free_kv"]
    seconds = {s: {"d|default|p2|shed_kv_watermark": "4"} for s in range(NOW - 40, NOW + 1)}
    seconds[NOW - 2]["d|default|p2|shed_tier_budget"] = "1"  # a minor reason does not lead
    for s in range(NOW - 30, NOW - 30 + GAP_SECONDS):  # a quiet spell shorter than a gap
        del seconds[s]
    seconds[NOW - 60] = {"d|default|p2|shed_kv_watermark": "4"}  # an earlier, separate run
    seconds[NOW] |= {"g|default|projected_free_kv": "0.06", "d|default|p1|admit": "5"}
    found = happening(window_of(seconds), LINES)
    (p2,) = found["shed"]
    assert p2["tier"] == "p2" and p2["pool"] == DEFAULT_POOL
    assert p2["reason"] == "shed_kv_watermark" and p2["since"] == NOW - 40
    assert p2["words"] == "KV cache low"
    assert p2["figures"] == f"6 % free, P2's watermark is {100 * p2_line:.0f} %"
    assert p2["per_second"] == 4.2 and not p2["whole_window"]


def test_shedding_that_stopped_a_while_ago_is_not_happening():
    seconds = {NOW - 8: {"d|default|p2|shed_inflight": "3"}}
    assert happening(window_of(seconds), LINES)["shed"] == []


def test_refusals_that_are_not_shedding_are_left_out_and_unknown_reasons_read_plainly():
    seconds = {NOW: {"d|default|p1|tenant_rate_limited": "5", "d|default|p0|shed_new_rule": "1"}}
    (shed,) = happening(window_of(seconds), LINES)["shed"]
    assert shed["tier"] == "p0" and shed["words"] == "new rule" and shed["figures"] == ""


def test_every_shed_reason_has_plain_words():
    assert {r for r in Reason if r.is_shed} == set(WORDS)


def test_core_only_since_when_the_mode_column_turned():
    seconds = {s: {"g|mode": "normal"} for s in range(NOW - 100, NOW - 50)}
    seconds |= {s: {"g|mode": "core-only"} for s in range(NOW - 50, NOW + 1, 2)}  # gaps
    found = happening(window_of(seconds), LINES)
    assert found["mode"] == "core-only" and found["mode_since"] == NOW - 50


def test_a_tier_shed_the_whole_window_says_so():
    seconds = {s: {"d|default|p2|shed_forced": "1"} for s in range(NOW - SECONDS + 1, NOW + 1)}
    (shed,) = happening(window_of(seconds), LINES)["shed"]
    assert shed["whole_window"] and shed["words"] == "shed by hand"


def test_events_in_the_window_oldest_first():
    switches = [
        AuditEntry("mode", "mode normal", "bob", "cli", at=NOW - 5),
        AuditEntry("mode", "mode core-only", "alice from 10.0.0.7", "dashboard", at=NOW - 20),
        AuditEntry("mode", "shed p2", "carol", "api", at=NOW - SECONDS - 1),  # before it
        AuditEntry("tenant", "tenant acme added", "dan", "cli", at=NOW - 15),
    ]
    moves = [{"at": NOW - 10, "reason": "P0 TTFT misses: P2 share down", "pool": "default"}]
    found = page.events(switches, moves, NOW - SECONDS + 1)
    assert [event["at"] for event in found] == [NOW - 20, NOW - 15, NOW - 10, NOW - 5]
    assert found[0] == {
        "at": NOW - 20,
        "kind": "switch",
        "text": "mode core-only by alice from 10.0.0.7 via dashboard",
    }
    assert found[1] == {
        "at": NOW - 15,
        "kind": "change",
        "text": "tenant acme added by dan via cli",
    }
    assert found[2]["kind"] == "controller" and found[2]["pool"] == "default"


def test_the_lines_are_each_pools_thresholds_and_slo_targets():
    pool = {"models": ["m"], "slo_targets": {"p0": {"ttft_ms": 400}}}
    config = QosConfig.model_validate({"pools": {"big": pool}})
    found = page.lines(Snapshot(1, config))
    assert found["big"]["p0"]["ttft_slo_ms"] == 400
    assert found["big"]["p2"]["shed_below_free_kv"] == config.tiers[Tier.P2].shed_below_free_kv


def test_a_tier_another_pools_model_serves_lately_is_named_with_that_model():
    pools = {
        "pools": {
            "big": {"models": ["qwen-72b"], "tiers": {"p1": {"overflow": ["small"]}}},
            "small": {"models": ["llama-8b"], "max_model_len": 8_000},
        }
    }
    lines = page.lines(Snapshot(1, QosConfig.from_partial(pools)))
    seconds = {s: {"o|small|p1|big": "2", "d|small|p1|admit": "3"} for s in range(NOW - 4, NOW + 1)}
    seconds[NOW - 30] = {"o|small|p2|big": "1"}  # long ago: no longer happening
    (moved,) = happening(window_of(seconds), lines)["overflow"]
    assert moved == {
        "pool": "big",
        "tier": "p1",
        "to": "small",
        "model": "llama-8b",
        "per_second": 2.0,
    }
    assert happening(window_of({NOW: {"d|big|p1|admit": "1"}}), lines)["overflow"] == []
