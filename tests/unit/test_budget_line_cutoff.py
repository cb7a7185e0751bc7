"""The cutoff above which a contended tier's budget serves no request: the dearest of
what asked lately that the bucket's rate still covers, cheapest first."""

from __future__ import annotations

import math

from sidecar.request.queueing.budget_line import Demand
from tests.unit.clock import Clock

KEY = "qos:{bucket-p1}:tier"


def test_a_bucket_that_refills_all_that_asks_cuts_nothing():
    clock = Clock()
    demand = Demand(clock, window=10)
    assert demand.cutoff(KEY, rate=100) == math.inf  # nothing asked yet
    for cost in (100, 200, 300):
        demand.note(KEY, cost)
    assert demand.cutoff(KEY, rate=100) == math.inf  # 600 asked, 1000 refilled


def test_the_cheapest_that_the_rate_covers_are_served_and_the_dearer_cut():
    clock = Clock()
    demand = Demand(clock, window=10)
    for cost in (500, 100, 300, 200, 400):
        demand.note(KEY, cost)
        clock.now += 1
    # 100 + 200 + 300 = 600 fit the 700 refilled in 10 s; with 400 it would be 1000.
    assert demand.cutoff(KEY, rate=70) == 300
    assert demand.cutoff(KEY, rate=5) == 0  # not even the cheapest fits: all cut
    assert demand.cutoff("qos:{bucket-p2}:tier", rate=10) == math.inf  # its own demand


def test_what_asked_before_the_window_no_longer_counts():
    clock = Clock()
    demand = Demand(clock, window=10)
    demand.note(KEY, 900)
    clock.now = 5
    demand.note(KEY, 100)
    assert demand.cutoff(KEY, rate=50) == 100  # 1000 asked, 500 refilled
    clock.now = 10.5  # the 900 asked 10.5 s ago
    assert demand.cutoff(KEY, rate=50) == math.inf
