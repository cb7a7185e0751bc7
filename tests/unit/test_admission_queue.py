"""The admission queue's async side: waiting, releasing, timing out, leaving."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.config.base import Tier
from sidecar.config.schema import QosConfig
from sidecar.request.queueing.queue import AdmissionQueue, QueueFull

pytestmark = pytest.mark.asyncio


def queue(max_concurrency: int = 1, **tiers) -> AdmissionQueue:
    config = QosConfig.from_partial({"fleet": {"max_concurrency": max_concurrency}, "tiers": tiers})
    return AdmissionQueue(lambda: config)


async def test_a_free_slot_is_taken_at_once_and_given_back_once():
    admission = queue(max_concurrency=2)
    first = admission.try_take(Tier.P1, "a")
    second = admission.try_take(Tier.P2, "b")
    assert first and second and admission.try_take(Tier.P0, "c") is None
    assert admission.release(first.id) is first
    assert admission.release(first.id) is None  # exactly once
    assert len(admission.slots) == 1


async def test_a_waiter_gets_the_slot_a_finished_request_gives_back():
    admission = queue()
    held = admission.try_take(Tier.P1, "a")
    waiting = asyncio.create_task(admission.wait(Tier.P2, "b", max_wait=5))
    await asyncio.sleep(0)
    assert admission.scheduler.waiting(Tier.P2) == 1
    admission.release(held.id)
    slot = await waiting
    assert slot is not None and slot.tier is Tier.P2
    assert admission.scheduler.waiting(Tier.P2) == 0


async def test_waiters_are_released_by_priority():
    admission = queue()
    held = admission.try_take(Tier.P0, "x")
    order = []

    async def wait(tier):
        slot = await admission.wait(tier, "t", max_wait=5)
        order.append(tier)
        await asyncio.sleep(0)
        admission.release(slot.id)

    tasks = [asyncio.create_task(wait(t)) for t in (Tier.P2, Tier.P1, Tier.P0)]
    await asyncio.sleep(0)
    admission.release(held.id)
    await asyncio.gather(*tasks)
    assert order == [Tier.P0, Tier.P1, Tier.P2]


async def test_no_waiter_waits_past_its_max_wait():
    admission = queue()
    admission.try_take(Tier.P0, "x")
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await admission.wait(Tier.P2, "b", max_wait=0.05) is None
    assert loop.time() - started < 0.5
    assert admission.scheduler.waiting(Tier.P2) == 0


async def test_a_client_that_leaves_leaves_the_queue_at_once():
    admission = queue()
    held = admission.try_take(Tier.P0, "x")
    waiting = asyncio.create_task(admission.wait(Tier.P1, "b", max_wait=5))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert admission.scheduler.waiting(Tier.P1) == 0
    admission.release(held.id)
    assert len(admission.slots) == 0  # nobody was given the freed slot


async def test_a_slot_handed_to_a_client_leaving_that_instant_goes_back():
    admission = queue()
    held = admission.try_take(Tier.P0, "x")
    waiting = asyncio.create_task(admission.wait(Tier.P1, "b", max_wait=5))
    await asyncio.sleep(0)
    admission.release(held.id)  # hands the slot to the waiter...
    waiting.cancel()  # ...whose client goes away before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(admission.slots) == 0


async def test_a_full_tier_queue_refuses_more_waiters():
    admission = queue(p2={"share": 0.05, "max_queue_length": 1})
    admission.try_take(Tier.P0, "x")
    first = asyncio.create_task(admission.wait(Tier.P2, "a", max_wait=5))
    await asyncio.sleep(0)
    with pytest.raises(QueueFull):
        await admission.wait(Tier.P2, "b", max_wait=5)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_newcomers_queue_behind_waiters_that_go_first():
    admission = queue(max_concurrency=1)
    held = admission.try_take(Tier.P2, "x")
    waiting = asyncio.create_task(admission.wait(Tier.P0, "a", max_wait=5))
    await asyncio.sleep(0)
    admission.slots.release(held.id)  # freed without a dispatch yet
    assert admission.try_take(Tier.P1, "late") is None  # P0 is waiting: P1 may not jump it
    admission.dispatch()
    assert (await waiting).tier is Tier.P0
