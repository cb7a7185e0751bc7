"""The line of requests waiting for a bucket to refill: first come, first asked."""

from __future__ import annotations

import asyncio
import time

import pytest

from sidecar.request.limiter.buckets import BucketSpec, Verdict
from sidecar.request.queueing.budget_line import BudgetWaiters

BUCKET = BucketSpec("qos:{bucket-p1}:tier", rate=100.0, burst=100.0)
SOON = Verdict(False, refused=BUCKET, retry_after=0.005)


class Bucket:
    """Refuses each waiter's first ask (it refills in 5 ms), allows its second; notes
    who asked, and whether anyone asked while another's ask was under way."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.asking = 0
        self.overlapped = False

    def ask_for(self, name: str):
        async def ask() -> Verdict:
            self.overlapped |= self.asking > 0
            self.asking += 1
            await asyncio.sleep(0.001)
            self.asking -= 1
            self.asked.append(name)
            return Verdict(True) if self.asked.count(name) > 1 else SOON

        return ask


@pytest.mark.asyncio
async def test_only_the_head_asks_and_the_line_is_served_in_arrival_order():
    line = BudgetWaiters(time.monotonic)
    bucket = Bucket()
    deadline = time.monotonic() + 5
    waiting = []
    for name in "abcd":
        waiting.append(
            asyncio.create_task(
                line.wait(30, BUCKET.key, BUCKET.rate, SOON, deadline, bucket.ask_for(name))
            )
        )
        await asyncio.sleep(0)  # each joins before the next arrives
    verdicts = await asyncio.gather(*waiting)
    assert all(verdict.allowed for verdict in verdicts)
    assert "".join(bucket.asked) == "aabbccdd"
    assert not bucket.overlapped
    assert line.ahead(BUCKET.key) is None  # the line is gone with its last waiter


@pytest.mark.asyncio
async def test_a_newcomer_is_told_the_wait_of_the_whole_line_before_it():
    now = [100.0]
    line = BudgetWaiters(lambda: now[0])
    assert line.foreseen(BUCKET.key, BUCKET.rate, 50, 160) == pytest.approx(0.5)
    told = Verdict(False, refused=BUCKET, retry_after=0.8)
    never = asyncio.Event()

    async def ask() -> Verdict:
        await never.wait()
        return told

    head = asyncio.create_task(line.wait(30, BUCKET.key, BUCKET.rate, told, now[0] + 60, ask))
    second = asyncio.create_task(line.wait(20, BUCKET.key, BUCKET.rate, told, now[0] + 60, ask))
    await asyncio.sleep(0)
    assert line.ahead(BUCKET.key) == told
    # The head's 0.8 s, then the second's 20 tokens and the newcomer's 50 at 100/s.
    assert line.foreseen(BUCKET.key, BUCKET.rate, 50, 160) == pytest.approx(0.8 + 0.7)
    now[0] += 0.5
    assert line.foreseen(BUCKET.key, BUCKET.rate, 50, 160) == pytest.approx(0.3 + 0.7)
    # A cheaper newcomer goes ahead of the second (which has the time to spare for it).
    assert line.foreseen(BUCKET.key, BUCKET.rate, 10, 160) == pytest.approx(0.3 + 0.1)
    for task in (head, second):
        task.cancel()
    await asyncio.gather(head, second, return_exceptions=True)
    assert line.ahead(BUCKET.key) is None


@pytest.mark.asyncio
async def test_a_waiter_whose_turn_does_not_come_in_time_leaves_with_the_lines_refusal():
    line = BudgetWaiters(time.monotonic)
    slow = Verdict(False, refused=BUCKET, retry_after=0.2)
    asks = []

    async def ask() -> Verdict:
        asks.append(time.monotonic())
        return Verdict(True)

    start = time.monotonic()
    head = asyncio.create_task(line.wait(30, BUCKET.key, BUCKET.rate, slow, start + 5, ask))
    await asyncio.sleep(0)
    hurried = await line.wait(30, BUCKET.key, BUCKET.rate, slow, start + 0.05, ask)
    assert not hurried.allowed and hurried.retry_after == 0.2
    assert asks == []  # it never asked: the head was still waiting for the refill
    assert (await head).allowed


@pytest.mark.asyncio
async def test_the_cheaper_go_first_but_never_past_one_with_no_time_to_spare():
    now = [0.0]
    line = BudgetWaiters(lambda: now[0])
    told = Verdict(False, refused=BUCKET, retry_after=1.0)
    asked: list[str] = []
    open_bucket = asyncio.Event()

    def ask_for(name: str):
        async def ask() -> Verdict:
            await open_bucket.wait()
            asked.append(name)
            return Verdict(True)

        return ask

    def join(name: str, cost: float, deadline: float) -> asyncio.Task:
        return asyncio.create_task(
            line.wait(cost, BUCKET.key, BUCKET.rate, told, deadline, ask_for(name))
        )

    # The head's turn at 1 s; "big" (100 tokens) at 2 s, with until 2.3 s.
    waiting = [join("head", 50, 10), join("big", 100, 2.3)]
    await asyncio.sleep(0)
    # 20 tokens fit in big's 0.3 s to spare: "small" goes ahead of it, its turn at 1.2 s.
    assert line.foreseen(BUCKET.key, BUCKET.rate, 20, 10) == pytest.approx(1.2)
    waiting.append(join("small", 20, 10))
    await asyncio.sleep(0)
    # Big now has 0.1 s to spare: 40 tokens do not fit, so "medium" waits behind it...
    assert line.foreseen(BUCKET.key, BUCKET.rate, 40, 10) == pytest.approx(2.2 + 0.4)
    # ...and, with until 2.5 s only, does not get a turn in time anywhere.
    assert line.foreseen(BUCKET.key, BUCKET.rate, 40, 2.5) == pytest.approx(2.6)
    waiting.append(join("medium", 40, 10))
    await asyncio.sleep(0)
    open_bucket.set()
    assert all(v.allowed for v in await asyncio.gather(*waiting))
    assert asked == ["head", "small", "big", "medium"]


async def served_at_half_the_rate(line: BudgetWaiters, now: list[float]) -> list[Verdict]:
    """Five waiters of 30 tokens in one line, all in it before the head is served, each
    served in twice the time its cost takes at the bucket's rate."""
    ready = Verdict(False, refused=BUCKET, retry_after=0.0)
    all_in_line = asyncio.Event()

    async def slow_ask() -> Verdict:
        await all_in_line.wait()
        now[0] += 2 * 30 / BUCKET.rate
        return Verdict(True)

    waiting = []
    for _ in range(5):
        waiting.append(
            asyncio.create_task(line.wait(30, BUCKET.key, BUCKET.rate, ready, 100, slow_ask))
        )
        await asyncio.sleep(0)
    all_in_line.set()
    return await asyncio.gather(*waiting)


@pytest.mark.asyncio
async def test_turns_are_foreseen_at_the_pace_the_line_was_served():
    now = [0.0]
    line = BudgetWaiters(lambda: now[0])
    assert line.foreseen(BUCKET.key, BUCKET.rate, 50, 100) == pytest.approx(0.5)
    assert all(v.allowed for v in await served_at_half_the_rate(line, now))
    # Four grants after another's, each at half the rate: the next line is foreseen so.
    assert line.foreseen(BUCKET.key, BUCKET.rate, 50, 100) == pytest.approx(1.0)
    assert line.foreseen("qos:{bucket-p2}:tier", BUCKET.rate, 50, 100) == pytest.approx(0.5)
    # The four behind the head were foreseen every 0.3 s and served every 0.6 s: their
    # turns came 0.9, 1.2, 1.5 and 1.8 s late. The line keeps the 95th percentile clear.
    assert line.margin(BUCKET.key) == pytest.approx(1.5)
    assert line.margin("qos:{bucket-p2}:tier") == 0.0


@pytest.mark.asyncio
async def test_nobody_passes_a_waiter_into_the_margin_kept_before_its_deadline():
    now = [0.0]
    line = BudgetWaiters(lambda: now[0])
    await served_at_half_the_rate(line, now)
    assert line.margin(BUCKET.key) == pytest.approx(1.5)  # as above

    start, asked, open_bucket = now[0], [], asyncio.Event()

    def join(name: str, cost: float, deadline: float) -> asyncio.Task:
        async def ask() -> Verdict:
            await open_bucket.wait()
            asked.append(name)
            return Verdict(True)

        told = Verdict(False, refused=BUCKET, retry_after=1.0)
        return asyncio.create_task(
            line.wait(cost, BUCKET.key, BUCKET.rate, told, start + deadline, ask)
        )

    # At the pace learnt (50 tokens a second): the head's turn at 1 s, "big" (100) at 3 s,
    # its deadline at 4.5 s. "small" (20) ahead of it would put big's turn at 3.4 s: before
    # its deadline, but within its 1.5 s margin, so small waits behind it.
    waiting = [join("head", 50, 100), join("big", 100, 4.5)]
    await asyncio.sleep(0)
    assert line.foreseen(BUCKET.key, BUCKET.rate, 20, start + 100) == pytest.approx(3.4)
    waiting.append(join("small", 20, 100))
    await asyncio.sleep(0)
    open_bucket.set()
    assert all(v.allowed for v in await asyncio.gather(*waiting))
    assert asked == ["head", "big", "small"]
