"""The history window: per-second series as the page draws them, from what the sidecars
added to each second. Pure."""

from __future__ import annotations

import pytest

from sidecar.operator.history.window import (
    SECONDS,
    TTFT_BUCKETS_MS,
    Window,
    percentile_of_buckets,
    ttft_bucket,
)

NOW = 1_000_000


def test_counters_gauges_and_shed_reasons_a_second():
    window = Window()
    earlier = {
        "d|default|p2|admit": "3",
        "d|default|p2|shed_kv_watermark": "7",
        "g|default|free_kv": "0.12",
        "g|default|shedding|p2": "shed_kv_watermark",
        "g|mode": "normal",
    }
    window.merge(NOW - 1, earlier)
    window.merge(NOW, {"d|default|p2|admit": "5", "g|default|free_kv": "0.2"})
    series = window.series()
    assert series["start"] == NOW - SECONDS + 1 and series["now"] == NOW
    p2 = series["pools"]["default"]["tiers"]["p2"]
    assert p2["admitted"][-2:] == [3.0, 5.0] and p2["admitted"][0] == 0.0
    assert p2["shed"] == {"shed_kv_watermark": [0.0] * (SECONDS - 2) + [7.0, 0.0]}
    assert p2["shedding"][-2:] == ["shed_kv_watermark", None]
    assert series["pools"]["default"]["free_kv"][-2:] == [0.12, 0.2]
    assert series["pools"]["default"]["free_kv"][0] is None  # nothing said then
    assert series["mode"][-2] == "normal"
    assert len(p2["admitted"]) == SECONDS


def test_a_second_read_again_replaces_what_was_read_of_it_and_old_ones_drop_off():
    window = Window()
    window.advance(NOW)
    window.merge(NOW, {"d|default|p0|admit": "1"})
    window.merge(NOW, {"d|default|p0|admit": "4"})  # the other sidecars' adds came in
    assert window.series()["pools"]["default"]["tiers"]["p0"]["admitted"][-1] == 4.0
    window.advance(NOW + 10)
    admitted = window.series()["pools"]["default"]["tiers"]["p0"]["admitted"]
    assert admitted[-11] == 4.0 and admitted[-10:] == [0.0] * 10
    window.advance(NOW + SECONDS)
    assert window.series()["pools"]["default"]["tiers"]["p0"]["admitted"] == [0.0] * SECONDS


def test_first_token_p99_over_the_ten_seconds_before_each_second():
    window = Window()
    window.advance(NOW)
    for second in range(NOW - 30, NOW - 10):  # 1 slow first token in 100: p99 still fast
        window.merge(second, {"t|default|p0|100": "99", "t|default|p0|2000": "1"})
    for second in range(NOW - 10, NOW + 1):  # then 2 in 100: the p99 is in the slow bucket
        window.merge(second, {"t|default|p0|100": "98", "t|default|p0|2000": "2"})
    p99 = window.series()["pools"]["default"]["tiers"]["p0"]["ttft_p99_ms"]
    assert p99[-12] == 100.0  # its 10 s all of the first kind
    assert p99[-1] == 2000.0
    assert p99[0] is None  # no sample in the 10 s up to the window's start


def test_buckets_and_their_percentile():
    assert ttft_bucket(0.01) == 50 and ttft_bucket(0.1) == 100 and ttft_bucket(0.101) == 200
    assert ttft_bucket(100) == TTFT_BUCKETS_MS[-1]
    assert percentile_of_buckets([(100, 99), (2000, 1)], 0.99) == 100.0
    assert percentile_of_buckets([(100, 98), (2000, 2)], 0.99) == 2000.0
    assert percentile_of_buckets([(100, 0)], 0.99) is None


@pytest.mark.parametrize("pool", ["default", "pool-a"])
def test_pools_are_kept_apart(pool):
    window = Window()
    window.advance(NOW)
    window.merge(NOW, {f"d|{pool}|p1|admit": "2", "d|other|p1|admit": "9", "g|mode": "shadow"})
    pools = window.series()["pools"]
    assert pools[pool]["tiers"]["p1"]["admitted"][-1] == 2.0
    assert pools["other"]["tiers"]["p1"]["admitted"][-1] == 9.0
    assert "mode" not in pools
