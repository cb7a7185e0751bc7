"""Slots whose access-log entry never comes are given back after a grace, by one timer."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from sidecar.config.base import Tier
from sidecar.metrics import SidecarMetrics
from sidecar.request.completion import exchange_ends
from sidecar.request.completion.exchange_ends import ExchangeEnds


class HeldSlots:
    """The queue's part: which slots are still held, and giving one back."""

    def __init__(self, slots: list[str]) -> None:
        self.held = set(slots)
        self.given_back = {slot: asyncio.Event() for slot in slots}

    def release(self, slot: str) -> SimpleNamespace | None:
        if slot not in self.held:
            return None
        self.held.remove(slot)
        self.given_back[slot].set()
        return SimpleNamespace(tier=Tier.P1)


def before_response(metrics: SidecarMetrics) -> float:
    value = metrics.registry.get_sample_value(
        "qos_exchange_ends_total", {"tier": "p1", "how": "before_response"}
    )
    return value or 0.0


@pytest.mark.asyncio
async def test_slots_the_access_log_never_named_are_given_back_after_the_grace(monkeypatch):
    monkeypatch.setattr(exchange_ends, "UNLOGGED_GRACE_SECONDS", 0.05)
    queue, metrics = HeldSlots(["a", "b", "c"]), SidecarMetrics()
    ends = ExchangeEnds(queue, metrics, None, None, None, None)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    ends.stream_ended("a")
    ends.stream_ended("b")
    first_sweep = ends._sweep
    assert first_sweep is not None
    queue.release("a")  # the access log named this one in time
    started = loop.time()
    await asyncio.wait_for(queue.given_back["b"].wait(), timeout=5)
    assert loop.time() - started >= 0.04  # not before its grace
    assert before_response(metrics) == 1.0  # b only: a's end was logged
    # A slot ending while the sweep is pending shares its timer, and comes back too.
    ends.stream_ended("c")
    await asyncio.wait_for(queue.given_back["c"].wait(), timeout=5)
    assert before_response(metrics) == 2.0
    assert ends._sweep is None and not ends._unlogged
