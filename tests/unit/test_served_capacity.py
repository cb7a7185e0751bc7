"""The capacity in force follows what the engines serve while their queues are full: the
measure (served.py), and the monitor putting it in force for budgets and forecasts. Pure:
the clock and the reports are stand-ins."""

from __future__ import annotations

import pytest

from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.load import PodLoad
from sidecar.loops.overload.monitor import LoadMonitor
from sidecar.loops.overload.served import (
    HALF_LIFE_SECONDS,
    HOLD_SECONDS,
    MIN_ENDS,
    SAMPLE_SECONDS,
    SETTLE_SECONDS,
    ServedCapacity,
)
from tests.unit.clock import Clock
from tests.unit.test_projection import Reports

CONFIGURED = 10_000.0
POOL = "default"


class Pool:
    """The pool as the measure sees it: requests held in it, and a clock."""

    def __init__(self, share: float = 1.0) -> None:
        self.clock = Clock()
        self.held = 10
        self.served = ServedCapacity(lambda _pool: share, lambda _pool: self.held, self.clock)
        assert self.served.observe(POOL, True, CONFIGURED) is None  # a spell begins

    def serve(self, seconds: float, per_second: float, growing: bool = True) -> float | None:
        """Answers costing 100 tokens each, ending at `per_second` tokens a second for
        `seconds`, the queues full all along and (`growing`) the requests held growing,
        observed each sample; the last figure observed."""
        figure = None
        for _ in range(round(seconds / SAMPLE_SECONDS)):
            for _ in range(round(per_second * SAMPLE_SECONDS / 100)):
                self.served.served(POOL, 100)
            self.held += 1 if growing else 0
            self.clock.now += SAMPLE_SECONDS
            figure = self.served.observe(POOL, True, CONFIGURED)
        return figure


def test_an_engine_falling_behind_is_measured_within_a_few_half_lives():
    pool = Pool()
    assert pool.serve(1, 500) is None  # fewer than MIN_ENDS answers yet
    figure = pool.serve(4 * HALF_LIFE_SECONDS, 4_000)
    assert figure is not None and 4_000 < figure < 4_000 + 0.1 * (CONFIGURED - 4_000)
    # One odd second moves it little.
    assert pool.serve(1, 0) == pytest.approx(figure * 0.5 ** (1 / HALF_LIFE_SECONDS))


def test_a_queue_that_holds_without_growing_says_the_engines_keep_up():
    pool = Pool()
    slow = pool.serve(3 * HALF_LIFE_SECONDS, 4_000)
    assert slow is not None and slow < CONFIGURED / 2
    # The backlog stops growing: what ends is all that was sent, not all they can.
    caught_up = pool.serve(4 * HALF_LIFE_SECONDS, 4_000, growing=False)
    assert caught_up is not None and caught_up > CONFIGURED - 0.1 * (CONFIGURED - slow)


def test_only_time_with_full_queues_counts_and_what_ended_before_a_spell_does_not():
    clock = Clock()
    served = ServedCapacity(lambda _pool: 1.0, lambda _pool: 10, clock)
    for _ in range(50):
        served.served(POOL, 100)  # ended while the engines had seats to spare
    clock.now += 5
    assert served.observe(POOL, False, CONFIGURED) is None
    assert served.observe(POOL, True, CONFIGURED) is None  # the spell begins here
    clock.now += SAMPLE_SECONDS
    served.served(POOL, 100)
    assert served.observe(POOL, True, CONFIGURED) is None  # one answer: not known yet
    assert Pool().serve(2 * MIN_ENDS, 100) is not None


def test_queues_full_in_bursts_shorter_than_a_settled_spell_say_nothing():
    pool = Pool()
    for _ in range(30):  # a pool well below its capacity: its queues fill now and then
        assert pool.serve(SETTLE_SECONDS - SAMPLE_SECONDS, 2_000) is None
        pool.clock.now += SAMPLE_SECONDS
        assert pool.served.observe(POOL, False, CONFIGURED) is None
        assert pool.served.observe(POOL, True, CONFIGURED) is None  # the next burst


def test_a_figure_told_that_moves_starts_the_measure_afresh():
    pool = Pool()
    assert pool.serve(20, 4_000) is not None
    pool.clock.now += SAMPLE_SECONDS
    # A pod joins: the figure told doubles, and what was measured against the old one
    # no longer says anything of it.
    assert pool.served.observe(POOL, True, 2 * CONFIGURED) is None
    # Nor does a small wobble of the figure start it afresh.
    steady = Pool()
    assert steady.serve(20, 4_000) is not None
    steady.clock.now += SAMPLE_SECONDS
    assert steady.served.observe(POOL, True, CONFIGURED * 1.005) is not None


def test_this_sidecar_s_answers_stand_for_its_share_of_the_pool():
    one = Pool(share=1.0).serve(20, 4_000)
    other = Pool(share=0.5).serve(20, 2_000)  # half of the same engines' answers
    assert one is not None and other == pytest.approx(one)


def test_the_figure_holds_a_while_after_the_queues_drain_then_is_dropped():
    pool = Pool()
    figure = pool.serve(20, 4_000)
    assert figure is not None
    pool.clock.now += HOLD_SECONDS / 2
    assert pool.served.observe(POOL, False, CONFIGURED) == figure
    pool.clock.now += HOLD_SECONDS
    assert pool.served.observe(POOL, False, CONFIGURED) is None
    # A spell long after starts again from the figure in force, not the old measure.
    assert pool.served.observe(POOL, True, CONFIGURED) is None


@pytest.mark.asyncio
@pytest.mark.parametrize("follow", [True, False])
async def test_the_monitor_puts_the_lesser_figure_in_force_while_queues_are_full(follow):
    clock = Clock()
    fleet = {"capacity_tokens_per_second": CONFIGURED, "follow_served_capacity": follow}
    snapshot = Snapshot(1, QosConfig.from_partial({"fleet": fleet}))
    pool = snapshot.pools.default
    held = [10]
    served = ServedCapacity(lambda _pool: 1.0, lambda _pool: held[0], clock)
    queued = PodLoad("a", 0.5, 2000, 4, 3, kv_block_size=16)
    reports = Reports(queued)
    monitor = LoadMonitor(reports, lambda: snapshot, clock=clock, served=served)  # type: ignore[arg-type]
    for _ in range(30):
        for _ in range(40):
            served.served(POOL, 100)  # 4 000 tokens a second, while more is sent
        held[0] += 1
        clock.now += SAMPLE_SECONDS
        await monitor.refresh()
    state = monitor.state.for_pool(POOL)
    if not follow:
        assert state.served is None and state.capacity(pool) == CONFIGURED
        return
    assert state.served is not None and state.capacity(pool) == state.served < 5_000
    # An engine faster than the figure does not raise it.
    for _ in range(30):
        for _ in range(200):
            served.served(POOL, 100)
        held[0] += 1
        clock.now += SAMPLE_SECONDS
        await monitor.refresh()
    assert state.capacity(pool) == CONFIGURED
    # Seats to spare: nothing new is measured, and the figure goes after the hold.
    reports.pods = [PodLoad("a", 0.5, 2000, 2, 0, kv_block_size=16)]
    clock.now += HOLD_SECONDS + 1
    await monitor.refresh()
    assert monitor.state.for_pool(POOL).served is None
