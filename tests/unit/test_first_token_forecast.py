"""A stream's first token foreseen from what the engines hold ahead of it, and answered at
once when that is past its TTFT target, or when its turn comes after a wait: pure, no
servers."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from sidecar.config.base import Tier
from sidecar.config.pools import DEFAULT_POOL
from sidecar.config.pools import resolve as resolve_pools
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.load import ClusterLoad, PodLoad, aggregate
from sidecar.loops.overload.shedding import SheddingState
from sidecar.metrics import SidecarMetrics
from sidecar.refusals import Refusal
from sidecar.request.admission.director import AdmissionDirector
from sidecar.request.admission.identity import IdentityResolver
from sidecar.request.bodies.tokens import estimate
from sidecar.request.completion.exchange_ends import ExchangeEnds
from sidecar.request.policy.decision import Admission, Admit, FirstTokenForecast, Respond
from sidecar.request.queueing.first_token import FirstTokenForecaster, engine_queue_seconds
from sidecar.request.queueing.queue import AdmissionQueue
from sidecar.request.queueing.waiting import FirstTokenDue, Wait, Waiting
from tests.unit.test_admission_decider import SHORT, TENANTS, FakeLimiter, chat, lookup
from tests.unit.test_foreseen_waits import Clock

CONFIG = QosConfig.from_partial({"fleet": {"max_concurrency": 100}})
POOL = resolve_pools(CONFIG).default
COST = 500.0  # a request's prompt and output, in budget tokens


def engine_load(seats: int, by_priority: bool = True, capacity: float = 0.0) -> SheddingState:
    pod = PodLoad("vllm-0", 0.5, 1000, running=seats, waiting=0)
    load = ClusterLoad((pod,), 0.5, seats, capacity or None, seats=seats, by_priority=by_priority)
    return SheddingState(load=load)


def busy_queue(clock: Clock, held: dict[Tier, int], per_second: float) -> AdmissionQueue:
    """A queue holding `held` slots, having given slots back at `per_second` lately."""
    queue = AdmissionQueue(lambda: CONFIG, clock=clock)
    for _ in range(20):
        slot = queue.try_take(Tier.P2, "t", True, POOL)
        assert slot is not None
        clock.now += 1 / per_second
        queue.release(slot.id)
    for tier, count in held.items():
        for _ in range(count):
            assert queue.try_take(tier, "t", True, POOL) is not None
    return queue


def test_the_engine_queue_is_what_is_held_past_the_seats_at_the_release_rate():
    assert engine_queue_seconds(ahead=10, seats=4, per_second=2.0) == pytest.approx(3.5)
    assert engine_queue_seconds(ahead=3, seats=4, per_second=2.0) == 0.0  # a seat is free
    assert engine_queue_seconds(ahead=10, seats=0, per_second=2.0) == 0.0  # seats unknown
    assert engine_queue_seconds(ahead=10, seats=4, per_second=None) == 0.0  # rate unknown


def test_a_newcomer_is_behind_its_betters_and_equals_when_the_engines_go_by_priority():
    clock = Clock()
    queue = busy_queue(clock, {Tier.P0: 2, Tier.P1: 6, Tier.P2: 3}, per_second=2.0)
    by_priority = FirstTokenForecaster(queue, lambda: engine_load(4))
    assert by_priority.foresee(Tier.P1, POOL, COST).engine_queue == pytest.approx((8 + 1 - 4) / 2)
    assert by_priority.foresee(Tier.P0, POOL, COST).engine_queue == 0.0  # 2 ahead, 4 seats
    assert by_priority.foresee(Tier.P2, POOL, COST).engine_queue == pytest.approx((11 + 1 - 4) / 2)
    first_come = FirstTokenForecaster(queue, lambda: engine_load(4, by_priority=False))
    assert first_come.foresee(Tier.P0, POOL, COST).engine_queue == pytest.approx((11 + 1 - 4) / 2)


def test_before_any_release_the_capacity_says_how_fast_requests_like_it_end():
    queue = AdmissionQueue(lambda: CONFIG, clock=Clock())
    for _ in range(10):
        assert queue.try_take(Tier.P1, "t", True, POOL) is not None
    # 2 000 tokens a second serve 4 requests of 500 a second: 7 ahead of its seat.
    forecaster = FirstTokenForecaster(queue, lambda: engine_load(4, capacity=2000))
    assert forecaster.foresee(Tier.P1, POOL, COST).engine_queue == pytest.approx(7 / 4)


def test_the_rest_is_what_streams_took_beyond_their_engine_queue_lately():
    clock = Clock()
    queue = busy_queue(clock, {Tier.P1: 5}, per_second=2.0)
    forecaster = FirstTokenForecaster(queue, lambda: engine_load(4))
    assert forecaster.foresee(Tier.P1, POOL, COST) == FirstTokenForecast(1.0, None)
    for _ in range(8):
        queue.first_tokens.note(Tier.P1, DEFAULT_POOL, 0.4)
    foreseen = forecaster.foresee(Tier.P1, POOL, COST)
    assert foreseen.rest == pytest.approx(0.4) and foreseen.seconds == pytest.approx(1.4)


def test_seats_are_the_most_each_pod_was_seen_running():
    idle = PodLoad("a", 0.1, 1000, running=1, waiting=0, scheduling_policy="priority")
    full = PodLoad("b", 0.1, 1000, running=4, waiting=3, scheduling_policy="priority")
    load = aggregate([idle, full], {"a": 4, "gone": 8})
    assert load.seats == 8 and load.by_priority
    fcfs = PodLoad("c", 0.1, 1000, running=2, waiting=0, scheduling_policy="fcfs")
    assert not aggregate([idle, fcfs]).by_priority


def director(clock: Clock, queue: AdmissionQueue, load: SheddingState) -> AdmissionDirector:
    snapshot = Snapshot(1, CONFIG, TENANTS)
    return AdmissionDirector(
        lambda: snapshot,
        IdentityResolver(lookup),
        FakeLimiter(),
        estimate,
        shedding=lambda: load,
        queue=queue,
        clock=clock,
    )


@pytest.mark.asyncio
async def test_a_stream_foreseen_past_its_target_is_answered_at_once_p0_never():
    clock = Clock()
    # 20 P1 streams held by engines of 4 seats that free 4 a second: a newcomer's first
    # token is 4.25 s away, past P1's 3 s target.
    queue = busy_queue(clock, {Tier.P1: 20}, per_second=4.0)
    decider = director(clock, queue, engine_load(4))
    late = await decider.decide(chat("k-cap", messages=SHORT, stream=True))
    assert isinstance(late, Respond) and late.reason == "shed_first_token_foreseen"
    whole = await decider.decide(chat("k-cap", messages=SHORT))  # its SLO is not a TTFT
    assert isinstance(whole, Admit)
    payment = await decider.decide(chat("k-p0", messages=SHORT, stream=True))
    assert isinstance(payment, Admit)  # P0 is never shed: ahead of it, nobody
    assert payment.record.first_token == FirstTokenForecast(0.0, None)
    unknown = director(clock, queue, engine_load(0))  # no pod seen running: not foreseen
    assert isinstance(await unknown.decide(chat("k-cap", messages=SHORT, stream=True)), Admit)


@pytest.mark.asyncio
async def test_the_forecast_at_pricing_carries_how_much_later_waiters_were_foreseen():
    clock = Clock()
    queue = busy_queue(clock, {Tier.P1: 6}, per_second=4.0)  # 3 past the seats: 0.75 s
    decider = director(clock, queue, engine_load(4))
    first = await decider.decide(chat("k-cap", messages=SHORT, stream=True))
    assert isinstance(first, Admit)
    foreseen = first.record.first_token
    assert foreseen is not None and foreseen.growth == 0.0
    for _ in range(8):
        queue.first_tokens.note_growth(Tier.P1, DEFAULT_POOL, 0.5)
    later = await decider.decide(chat("k-cap", messages=SHORT, stream=True))
    assert isinstance(later, Admit) and later.record.first_token is not None
    assert later.record.first_token.growth == 0.5


def test_a_timed_stream_teaches_the_rest_and_measures_the_error():
    clock = Clock()
    queue, metrics = AdmissionQueue(lambda: CONFIG, clock=clock), SidecarMetrics()

    class Samples:
        def record(self, *args, **kwargs) -> None:
            pass

    snapshot = Snapshot(1, CONFIG, TENANTS)
    ends = ExchangeEnds(queue, metrics, Samples(), lambda: snapshot, None, lambda *a: None)
    foreseen = FirstTokenForecast(engine_queue=1.5, rest=0.3)
    admitted = Admission(tier="p1", pool=DEFAULT_POOL, queue_wait=0.5, first_token=foreseen)
    for _ in range(8):
        ends.first_byte(admitted, 2.6)  # 0.5 s waited, then 2.1 s: 1.5 queued, 0.6 the rest
    assert queue.first_tokens.most_took(Tier.P1, DEFAULT_POOL) == pytest.approx(0.6)

    def errors_up_to(le: str) -> float | None:
        return metrics.registry.get_sample_value(
            "qos_first_token_forecast_error_seconds_bucket",
            {"tier": "p1", "pool": DEFAULT_POOL, "le": le},
        )

    # 2.1 s came against 1.8 foreseen: all eight 0.3 s late.
    assert (errors_up_to("0.25"), errors_up_to("0.5")) == (0.0, 8.0)
    # Foreseen again at admission, with 1.9 s queued by then: 0.2 s beyond it.
    assert queue.first_tokens.most_took(Tier.P1, DEFAULT_POOL, at_admission=True) == (
        pytest.approx(0.6)
    )
    again = dataclasses.replace(admitted, first_token_again=FirstTokenForecast(1.9, 0.1))
    for _ in range(64):
        ends.first_byte(again, 2.6)
    assert queue.first_tokens.most_took(Tier.P1, DEFAULT_POOL, at_admission=True) == (
        pytest.approx(0.2)
    )
    assert queue.first_tokens.most_took(Tier.P1, DEFAULT_POOL) == pytest.approx(0.6)


async def no_hold(seconds: float) -> None:
    pass


@pytest.mark.parametrize(("waited", "admitted"), [(1.0, True), (2.5, False)])
@pytest.mark.asyncio
async def test_a_stream_whose_turn_comes_late_is_foreseen_again_and_shed_if_past(waited, admitted):
    clock = Clock()
    config = QosConfig.from_partial({"fleet": {"max_concurrency": 6}})
    pool = resolve_pools(config).default
    queue = AdmissionQueue(lambda: config, clock=clock)
    for _ in range(20):  # 4 slots given back a second lately
        slot = queue.try_take(Tier.P2, "t", True, pool)
        assert slot is not None
        clock.now += 0.25
        queue.release(slot.id)
    held = [queue.try_take(Tier.P1, "t", True, pool) for _ in range(6)]  # no slot free
    given_back = []
    waiting = Waiting(queue, given_back.append, clock, lambda: engine_load(4))
    due = FirstTokenDue(target=3.0, foreseen=0.4, cost=COST, sheddable=True)
    wait = Wait(Tier.P1, "t", pool, True, 2.9, False, first_token=due)
    holding = asyncio.Event()

    async def hold(seconds: float) -> None:
        holding.set()  # it waits for a slot from here on, without yielding first

    turn = asyncio.create_task(waiting.turn(wait, hold))
    await holding.wait()
    assert queue.scheduler.waiting(Tier.P1) == 1
    clock.now += waited
    freed = held[0]
    assert freed is not None
    queue.release(freed.id)  # its slot: 5 others held, 2 past the 4 seats at ~3 a second
    released = queue.slots.released
    if admitted:
        got = await turn
        assert got.slot and got.first_token is not None
        assert got.waited == pytest.approx(waited)
        assert 0.5 < got.first_token.engine_queue < 0.8 and waited + got.first_token.seconds < 3
        grown = got.first_token.seconds - 0.4  # later than at pricing: noted
        for _ in range(7):
            queue.first_tokens.note_growth(Tier.P1, DEFAULT_POOL, grown)
        assert queue.first_tokens.growth(Tier.P1, DEFAULT_POOL) == pytest.approx(grown)
        assert given_back == []
    else:
        with pytest.raises(Refusal) as refused:
            await turn
        assert refused.value.reason == "shed_first_token_foreseen"
        assert len(queue.slots) == 5 and given_back == [None]  # its slot and budget back
        assert queue.slots.released == released + 1
        assert queue.release_rate(DEFAULT_POOL) == pytest.approx(21 / 7.5)  # not a release


@pytest.mark.asyncio
async def test_p0_admitted_late_rather_than_shed_when_its_turn_comes():
    clock = Clock()
    queue = busy_queue(clock, {Tier.P0: 12}, per_second=2.0)
    waiting = Waiting(queue, lambda _: None, clock, lambda: engine_load(4))
    due = FirstTokenDue(target=1.0, foreseen=0.0, cost=COST, sheddable=False)
    turn = await waiting.turn(Wait(Tier.P0, "t", POOL, True, 1.0, False, first_token=due), no_hold)
    assert turn.slot and turn.first_token is None  # not waited: foreseen at pricing only
