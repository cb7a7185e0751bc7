"""Waits foreseen at admission and waits the client asks for: the forecast from the queue
and the release rate, the header, and the decider that answers at once what would only
wait out its time."""

from __future__ import annotations

import dataclasses

import pytest

from sidecar.config.base import Tier
from sidecar.config.schema import QosConfig, QueueConfig, TierConfig
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.shedding import SheddingState
from sidecar.refusals import Refusal
from sidecar.request.admission.director import AdmissionDirector
from sidecar.request.admission.identity import IdentityResolver
from sidecar.request.bodies.tokens import estimate
from sidecar.request.policy.decision import Admit, FirstTokenForecast, Respond
from sidecar.request.queueing.first_token import FirstTokenForecaster
from sidecar.request.queueing.forecast import (
    EventRate,
    FirstTokenTimes,
    foreseen_wait,
    releases_needed,
)
from sidecar.request.queueing.queue import AdmissionQueue
from sidecar.request.queueing.scheduler import Scheduler, Waiter
from sidecar.request.queueing.waiting import MAX_WAIT_HEADER, max_wait
from tests.unit.test_admission_decider import SHORT, TENANTS, FakeLimiter, begin, chat, lookup


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_rate_until_enough_releases_were_seen():
    clock = Clock()
    rate = EventRate(clock, window=10, min_releases=4)
    for _ in range(3):
        clock.now += 1
        rate.note()
    assert rate.per_second() is None
    clock.now += 1
    rate.note()
    assert rate.per_second() == pytest.approx(4 / 4)  # watched for 4 s, not the window


def test_the_rate_counts_the_window_s_releases_only():
    clock = Clock()
    rate = EventRate(clock, window=10, min_releases=4)
    clock.now += 20
    for _ in range(20):  # 20 releases in the last 2 s
        clock.now += 0.1
        rate.note()
    assert rate.per_second() == pytest.approx(20 / 10)
    clock.now += 9  # the first ten fall out of the window
    assert rate.per_second() == pytest.approx(11 / 10)


def queue_of(**waiting: int) -> Scheduler:
    scheduler = Scheduler(QueueConfig(p1_min_share=0.2))
    for tier_name, count in waiting.items():
        for _ in range(count):
            scheduler.add(Waiter(Tier(tier_name), "t", 0.0))
    return scheduler


def test_a_newcomer_waits_for_the_tiers_above_and_its_own():
    scheduler = queue_of(p0=3, p1=2, p2=7)
    assert releases_needed(scheduler, Tier.P0) == 4
    assert releases_needed(scheduler, Tier.P2) == 3 + 2 + 7 + 1


def test_p1_needs_no_more_than_its_min_share_gives_it():
    scheduler = queue_of(p0=50, p1=1)
    assert releases_needed(scheduler, Tier.P1) == pytest.approx(2 / 0.2)
    assert releases_needed(queue_of(p0=2, p1=1), Tier.P1) == 4  # fewer by strict order


def test_the_wait_is_the_releases_needed_at_the_rate_seen():
    clock = Clock()
    rate = EventRate(clock, window=10, min_releases=4)
    scheduler = queue_of(p2=9)
    assert foreseen_wait(scheduler, Tier.P2, rate) is None
    for _ in range(50):  # 5 a second
        clock.now += 0.2
        rate.note()
    assert foreseen_wait(scheduler, Tier.P2, rate) == pytest.approx(10 / 5)


def test_a_client_may_ask_to_wait_less_never_more():
    tier = TierConfig(share=0.3, max_queue_wait_seconds=5)
    assert max_wait({}, tier) == 5
    assert max_wait({MAX_WAIT_HEADER: "1500"}, tier) == 1.5
    assert max_wait({MAX_WAIT_HEADER: " 0 "}, tier) == 0
    assert max_wait({MAX_WAIT_HEADER: "60000"}, tier) == 5
    for bad in ("-1", "1.5", "soon", "", "١٢"):
        with pytest.raises(Refusal, match=MAX_WAIT_HEADER):
            max_wait({MAX_WAIT_HEADER: bad}, tier)


def decider_with_clock(clock: Clock, **config) -> tuple[AdmissionDirector, AdmissionQueue]:
    qos = QosConfig.from_partial({"fleet": {"max_concurrency": 1}, **config})
    snapshot = Snapshot(1, qos, TENANTS)
    admission = AdmissionQueue(lambda: qos, clock=clock)
    decider = AdmissionDirector(
        lambda: snapshot,
        IdentityResolver(lookup),
        FakeLimiter(),
        estimate,
        queue=admission,
        clock=clock,
    )
    return decider, admission


async def released_every(decider: AdmissionDirector, admission: AdmissionQueue, clock, seconds):
    """Ten P0 requests served one after another, each holding the one slot `seconds`."""
    for _ in range(10):
        taken = await decider.decide(chat("k-p0"))
        assert isinstance(taken, Admit)
        clock.now += seconds
        admission.release(taken.record.slot)


@pytest.mark.asyncio
async def test_a_wait_foreseen_longer_than_the_tier_allows_is_answered_at_once():
    clock = Clock()
    decider, admission = decider_with_clock(clock)
    await released_every(decider, admission, clock, 3.0)  # one release every 3 s
    busy = await decider.decide(chat("k-p0"))
    assert isinstance(busy, Admit)
    # P2 may wait 2 s; the next release is foreseen in 2.5 (4 in the last 10 s).
    shed = await decider.decide(chat("k-p2"))
    assert isinstance(shed, Respond) and shed.reason == "shed_queue_foreseen"
    assert shed.status == 200  # its tier's fallback, as after a wait
    # To come back once the queue has drained by what it outlasts its wait by.
    assert shed.headers["retry-after-ms"] == str(round((2.5 - 2.0) * 1000))
    # P0 may wait 10 s: it is held, and told what its wait was foreseen to be.
    held = await begin(decider, chat("k-p0"))
    assert held.holds == [10.0]
    await held.stop()


@pytest.mark.asyncio
async def test_a_wait_run_out_is_told_to_come_back_once_the_queue_ahead_drains_by_its_wait():
    clock = Clock()
    decider, admission = decider_with_clock(clock, tiers={"p2": {"max_queue_wait_seconds": 0.1}})
    await released_every(decider, admission, clock, 0.05)  # twenty releases a second
    busy = await decider.decide(chat("k-p0"))
    held = await begin(decider, chat("k-p2"))  # foreseen 0.05 s: it waits
    ahead = [await begin(decider, chat("k-p0")) for _ in range(3)]  # P0 goes first
    final = await held.task  # no release comes: it waits out its 0.1 s
    assert isinstance(final, Respond) and final.reason == "shed_queue_timeout"
    # A newcomer now waits for the three P0 and its own turn, 0.2 s; it may wait 0.1.
    assert final.headers["retry-after-ms"] == str(round((4 / 20 - 0.1) * 1000))
    for waiting in ahead:
        await waiting.stop()
    admission.release(busy.record.slot)


@pytest.mark.asyncio
async def test_a_wait_foreseen_within_the_limit_is_held_and_its_forecast_kept():
    clock = Clock()
    decider, admission = decider_with_clock(clock)
    await released_every(decider, admission, clock, 0.5)  # two releases a second
    busy = await decider.decide(chat("k-p0"))
    held = await begin(decider, chat("k-p2"))
    assert held.held
    admission.release(busy.record.slot)
    final = await held.task
    assert isinstance(final, Admit) and final.record.foreseen_wait == pytest.approx(0.5)


@pytest.mark.asyncio
async def test_a_client_that_will_not_wait_is_answered_at_once_when_no_slot_is_free():
    clock = Clock()
    decider, _ = decider_with_clock(clock)
    free = await decider.decide(chat("k-p2", extra_headers={MAX_WAIT_HEADER: "0"}))
    assert isinstance(free, Admit)  # a free slot needs no wait
    shed = await decider.decide(chat("k-p2", extra_headers={MAX_WAIT_HEADER: "0"}))
    assert isinstance(shed, Respond) and shed.reason == "shed_queue_timeout"
    short = await begin(decider, chat("k-p2", extra_headers={MAX_WAIT_HEADER: "300"}))
    assert short.holds == [0.3]
    await short.stop()


@pytest.mark.asyncio
async def test_a_malformed_wait_is_refused_in_the_api_s_shape():
    decider, _ = decider_with_clock(Clock())
    bad = await decider.decide(chat("k-p2", extra_headers={MAX_WAIT_HEADER: "soon"}))
    assert isinstance(bad, Respond) and (bad.status, bad.reason) == (400, "invalid_request")
    assert MAX_WAIT_HEADER.encode() in bad.body


@pytest.mark.asyncio
async def test_with_forecasts_off_every_request_waits_its_time_out():
    clock = Clock()
    decider, admission = decider_with_clock(clock, queue={"foresee_waits": False})
    await released_every(decider, admission, clock, 3.0)
    await decider.decide(chat("k-p0"))
    held = await begin(decider, chat("k-p2"))
    assert held.holds == [2.0]
    await held.stop()


def test_first_token_times_are_known_from_enough_recent_streams():
    clock = Clock()
    times = FirstTokenTimes(clock, window=30, kept=64, min_samples=8)
    for seconds in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
        times.note(Tier.P1, "default", seconds)
    assert times.most_took(Tier.P1, "default") is None  # 7 seen: too few
    times.note(Tier.P1, "default", 2.0)
    assert times.most_took(Tier.P1, "default") == 2.0  # the 99th percentile of 8: the last
    assert times.most_took(Tier.P2, "default") is None  # each tier its own
    clock.now += 31
    assert times.most_took(Tier.P1, "default") is None  # all too old
    for tenth in range(1, 21):
        times.note(Tier.P1, "default", tenth / 10)
    assert times.most_took(Tier.P1, "default") == 2.0  # the 95th of 20, past the 90th's 1.9


@pytest.mark.asyncio
async def test_a_streams_wait_is_capped_at_what_its_ttft_target_leaves():
    clock = Clock()
    # P1: 5 s of wait, a 3 s TTFT target; its streams take 2.2 s to a first token lately.
    decider, admission = decider_with_clock(clock)
    await decider.decide(chat("k-p0"))  # the one slot is taken
    unknown = await begin(decider, chat("k-cap", messages=SHORT, stream=True))
    assert unknown.holds == [3.0]  # its first token's time not known yet: the target
    await unknown.stop()
    for _ in range(8):
        admission.first_tokens.note(Tier.P1, "default", 2.2)
    stream = await begin(decider, chat("k-cap", messages=SHORT, stream=True))
    assert stream.holds == [pytest.approx(0.8)]
    for _ in range(8):  # waiters foreseen half a second later at their turn, lately
        admission.first_tokens.note_growth(Tier.P1, "default", 0.5)
    shorter = await begin(decider, chat("k-cap", messages=SHORT, stream=True))
    assert shorter.holds == [pytest.approx(0.3)]
    whole = await begin(decider, chat("k-cap", messages=SHORT))  # its SLO is not a TTFT
    assert whole.holds == [5.0]
    for _ in range(8):
        admission.first_tokens.note(Tier.P1, "default", 3.5)  # later than the target
    late = await decider.decide(chat("k-cap", messages=SHORT, stream=True))
    assert isinstance(late, Respond) and late.reason == "shed_first_token_foreseen"
    off, queue = decider_with_clock(clock, queue={"foresee_waits": False})
    for _ in range(8):
        queue.first_tokens.note(Tier.P1, "default", 2.2)
    await off.decide(chat("k-p0"))
    uncapped = await begin(off, chat("k-cap", messages=SHORT, stream=True))
    assert uncapped.holds == [5.0]
    for waiting in (stream, shorter, whole, uncapped):
        await waiting.stop()


def test_how_much_later_streams_were_foreseen_after_a_wait_caps_the_next_waits():
    clock = Clock()
    times = FirstTokenTimes(clock, window=30, kept=64, min_samples=8)
    for seconds in (-0.2, 0.0, 0.1, 0.1, 0.2, 0.3, 0.4):
        times.note_growth(Tier.P1, "default", seconds)
    assert times.growth(Tier.P1, "default") == 0.0  # 7 seen: too few
    times.note_growth(Tier.P1, "default", 0.9)
    assert times.growth(Tier.P1, "default") == 0.4  # the 90th percentile of 8: the 7th
    assert times.growth(Tier.P2, "default") == 0.0
    for _ in range(8):
        times.note_growth(Tier.P2, "default", -0.5)
    assert times.growth(Tier.P2, "default") == 0.0  # foreseen sooner: no cap
    clock.now += 31
    assert times.growth(Tier.P1, "default") == 0.0  # all too old


def test_after_a_silence_a_probe_goes_through_and_its_time_supersedes_slower_ones():
    clock = Clock()
    times = FirstTokenTimes(clock, window=30, kept=64, min_samples=8, probe_after=2)
    for seconds in (0.5, 0.6, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0):
        times.note(Tier.P1, "default", seconds)
    assert times.most_took(Tier.P1, "default") == 4.0
    assert not times.probe(Tier.P1, "default")  # a stream was timed just now
    clock.now += 2.5
    assert times.probe(Tier.P1, "default")
    assert not times.probe(Tier.P1, "default")  # one each 2 s
    clock.now += 2.5
    assert times.probe(Tier.P1, "default")
    times.note(Tier.P1, "default", 0.7)  # the probe, after a silence
    assert times.most_took(Tier.P1, "default") is None  # 3 left: 0.5, 0.6 and itself
    for _ in range(8):
        times.note(Tier.P1, "default", 0.8)
    assert times.most_took(Tier.P1, "default") == 0.8
    clock.now += 2.5
    times.note(Tier.P1, "default", 0.1)  # a silence but no probe: the slower ones stay
    assert times.most_took(Tier.P1, "default") == 0.8


@pytest.mark.asyncio
async def test_streams_foreseen_late_by_what_streams_took_are_probed_now_and_then():
    clock = Clock()
    decider, admission = decider_with_clock(clock)
    for _ in range(8):
        admission.first_tokens.note(Tier.P1, "default", 3.5)  # later than the 3 s target
    late = await decider.decide(chat("k-cap", messages=SHORT, stream=True))
    assert isinstance(late, Respond) and late.reason == "shed_first_token_foreseen"
    clock.now += 2.5  # none timed since
    unwatched = await decider.decide(chat("k-cap", messages=SHORT, stream=True))
    assert isinstance(unwatched, Respond)  # a probe that would not be timed: none
    watched = dataclasses.replace(chat("k-cap", messages=SHORT, stream=True), response_watched=True)
    probe = await decider.decide(watched)
    assert isinstance(probe, Admit) and probe.record.time_first_byte
    again = await decider.decide(watched)
    assert isinstance(again, Respond) and again.reason == "shed_first_token_foreseen"
    admission.release(probe.record.slot)


def test_a_stream_late_behind_the_engines_queue_alone_is_not_probed():
    clock = Clock()
    admission = AdmissionQueue(QosConfig, clock=clock)
    pool = Snapshot(1, QosConfig(), TENANTS).pools.get("default")
    forecaster = FirstTokenForecaster(admission, shedding=lambda: SheddingState())
    for _ in range(8):
        admission.first_tokens.note(Tier.P1, "default", 3.5)
    clock.now += 2.5
    queued = FirstTokenForecast(engine_queue=3.0, rest=3.5)  # P1's target: 3 s
    assert not forecaster.probe(Tier.P1, pool, queued)
    assert forecaster.probe(Tier.P1, pool, FirstTokenForecast(engine_queue=0.5, rest=3.5))


def test_the_pace_is_what_is_held_how_long_and_how_fast_it_starts():
    """Over the sidecar's own slots: 20 of 60 P1 held, the 40 given back held 5.125 s on
    average (one every 0.25 s), P1 taken 6 a second."""
    clock = Clock()
    admission = AdmissionQueue(QosConfig, clock=clock)
    assert admission.pace(None) is None  # nothing seen yet
    slots = [admission.try_take(Tier.P1, "t") for _ in range(60)]
    assert admission.pace(None) is None  # no release seen yet
    for slot in slots[:40]:
        clock.now += 0.25
        admission.release(slot.id)
    pool = slots[0].pool
    pace = admission.pace(pool)
    assert pace is not None and pace.held[Tier.P1] == 20 and pace.held[Tier.P0] == 0
    assert pace.holds[Tier.P1] == pytest.approx(0.25 * 41 / 2) and pace.holds[Tier.P0] is None
    assert pace.taken[Tier.P1] == pytest.approx(60 / 10) and pace.taken[Tier.P0] == 0.0
    assert admission.pace(None) == pace
    assert admission.pace("another-pool") is None
