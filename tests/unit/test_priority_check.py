"""Naming the pods that may ignore the priority the sidecar sends: no servers."""

from __future__ import annotations

from sidecar.loops.overload.load import PodLoad
from sidecar.loops.overload.priority_check import priority_unconfirmed


def pod(name: str, policy: str) -> PodLoad:
    return PodLoad(name, 0.1, 100, 1, 0, scheduling_policy=policy)


def test_pods_not_reporting_priority_scheduling_are_named_by_what_they_report():
    pods = [pod("a", "priority"), pod("b", "fcfs"), pod("c", ""), pod("d", "fcfs")]
    assert priority_unconfirmed(pods, send_priority=True) == {
        "fcfs": ["b", "d"],
        "unknown": ["c"],
    }


def test_nothing_to_confirm_when_no_priority_is_sent_or_all_honour_it():
    pods = [pod("b", "fcfs"), pod("c", "")]
    assert priority_unconfirmed(pods, send_priority=False) == {}
    assert priority_unconfirmed([pod("a", "priority")], send_priority=True) == {}
