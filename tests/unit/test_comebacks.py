"""A sale's sheds against when their tier was admitted again (bench promo's reading)."""

from __future__ import annotations

import pytest

from sidecar.tooling.benchmarks.comeback import comebacks
from sidecar.tooling.benchmarks.load import SERVED, SHED, Outcome, told_retry_after


def served(at: float, tier: str = "p2") -> Outcome:
    return Outcome(tier, at, SERVED, "", 0.5)


def shed(at: float, told: float | None, why: str = "shed_kv_watermark") -> Outcome:
    return Outcome("p2", at, SHED, why, 0.002, retry_after=told)


def test_each_shed_is_held_to_the_next_admission_of_its_tier():
    outcomes = [
        served(0.0),
        shed(1.0, told=2.0),  # admitted again 2.0 s after its answer: told right
        shed(1.5, told=0.5),  # 1.5 s after: told a third of it, outside 50 %
        served(3.002),
        served(3.5, tier="p1"),  # another tier's admission says nothing of P2
        shed(4.0, told=None),  # told nothing (not the gateway's, or unforeseen)
        shed(5.0, told=1.0),  # never admitted again: left out
    ]
    (figures,) = comebacks(outcomes).values()
    assert figures["sheds"] == 2
    assert figures["within_share"] == 0.5
    assert figures["told_median_s"] == pytest.approx(1.25)
    assert figures["took_median_s"] == pytest.approx(1.75)
    assert list(comebacks(outcomes)) == ["p2 shed_kv_watermark"]


def test_what_an_answer_says_of_when_to_come_back():
    assert told_retry_after({"retry-after-ms": "2400", "retry-after": "3"}) == 2.4
    assert told_retry_after({"retry-after": "3"}) == 3.0
    assert told_retry_after({"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"}) is None
    assert told_retry_after({}) is None
