"""Pods refusing at their queue limits: a rise in their refusals marks them full for a
while, and a full pod counts with no free KV in the watermark. Pure, on a fake clock."""

from __future__ import annotations

import dataclasses

import pytest

from sidecar.loops.overload.load import PodLoad, aggregate
from sidecar.loops.overload.refusals import RefusingPods

HOLD = 2.0


def pods(**refused: int) -> tuple[PodLoad, ...]:
    return tuple(
        PodLoad(name, 0.2, 1000, 1, 0, admission_rejections=count)
        for name, count in refused.items()
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def refusing(marked: tuple[PodLoad, ...]) -> set[str]:
    return {pod.pod_id for pod in marked if pod.refusing}


def test_a_rise_marks_the_pod_full_for_the_hold_and_no_longer():
    clock = Clock()
    watch = RefusingPods(clock)
    # A pod's first report marks nothing: its count may be from long ago.
    assert refusing(watch.marked(pods(a=40, b=0), HOLD)) == set()
    assert refusing(watch.marked(pods(a=41, b=0), HOLD)) == {"a"}
    clock.now += HOLD / 2
    assert refusing(watch.marked(pods(a=41, b=0), HOLD)) == {"a"}  # no rise: still held
    clock.now += HOLD / 2
    assert refusing(watch.marked(pods(a=41, b=0), HOLD)) == set()
    # A restarted server counts from 0 again: a fall is no refusal.
    assert refusing(watch.marked(pods(a=0, b=3), HOLD)) == {"b"}


def test_a_pod_gone_is_forgotten_and_a_zero_hold_marks_nothing():
    clock = Clock()
    watch = RefusingPods(clock)
    watch.marked(pods(a=0), HOLD)
    assert refusing(watch.marked(pods(a=1), HOLD)) == {"a"}
    assert refusing(watch.marked(pods(b=0), HOLD)) == set()
    assert refusing(watch.marked(pods(a=5), HOLD)) == set()  # seen anew: its first report
    assert refusing(watch.marked(pods(a=9), 0.0)) == set()


def test_a_refusing_pod_counts_with_no_free_kv():
    a, b = pods(a=1, b=0)
    assert aggregate([a, b]).free_kv_ratio == pytest.approx(0.8)
    full = aggregate([dataclasses.replace(a, refusing=True), b])
    assert full.free_kv_ratio == pytest.approx(0.4)  # one of two alike pods full
    # A server with no KV figure counts as full too while it refuses.
    tgi = PodLoad("tgi", None, 0, 3, 0, refusing=True)
    assert aggregate([tgi]).free_kv_ratio == 0.0
