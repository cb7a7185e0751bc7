"""The admission queue's release order, with hypothesis where it fits."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.config.base import Tier
from sidecar.config.schema import QueueConfig
from sidecar.request.queueing.scheduler import Scheduler, Waiter

NO_AGING = QueueConfig(promote_after_seconds=1e9, promote_after_passed_over=10**9, p1_min_share=0.0)


def waiter(tier: Tier, tenant: str = "t", at: float = 0.0) -> Waiter:
    return Waiter(tier=tier, tenant=tenant, enqueued_at=at)


def drain(scheduler: Scheduler, now: float = 0.0) -> list[Waiter]:
    released = []
    while (chosen := scheduler.release_next(now)) is not None:
        released.append(chosen)
    return released


arrivals = st.lists(
    st.tuples(st.sampled_from(list(Tier)), st.sampled_from("abc")), min_size=1, max_size=60
)


@settings(max_examples=200, deadline=None)
@given(arrivals)
def test_strict_priority_when_aging_and_shares_are_off(items):
    scheduler = Scheduler(NO_AGING)
    for tier, tenant in items:
        scheduler.add(waiter(tier, tenant))
    order = [w.tier for w in drain(scheduler)]
    assert order == sorted(order, key=[Tier.P0, Tier.P1, Tier.P2].index)
    assert len(order) == len(items)


@settings(max_examples=200, deadline=None)
@given(arrivals)
def test_each_tenants_requests_keep_their_arrival_order(items):
    scheduler = Scheduler()
    for index, (tier, tenant) in enumerate(items):
        scheduler.add(waiter(tier, tenant, at=index * 0.001))
    released = drain(scheduler, now=0.0)
    for tier in Tier:
        for tenant in "abc":
            mine = [w.sequence for w in released if w.tier is tier and w.tenant == tenant]
            assert mine == sorted(mine)


def test_tenants_take_turns_inside_a_tier():
    scheduler = Scheduler(NO_AGING)
    for _ in range(100):
        scheduler.add(waiter(Tier.P1, "burst"))
    for _ in range(5):
        scheduler.add(waiter(Tier.P1, "quiet"))
    first_ten = [w.tenant for w in drain(scheduler)[:10]]
    assert first_ten == ["burst", "quiet"] * 5


@settings(max_examples=100, deadline=None)
@given(share=st.sampled_from([0.1, 0.2, 0.25, 0.5]), rounds=st.integers(20, 200))
def test_p1_gets_its_minimum_share_under_sustained_p0_load(share, rounds):
    scheduler = Scheduler(
        QueueConfig(promote_after_seconds=1e9, promote_after_passed_over=10**9, p1_min_share=share)
    )
    for _ in range(rounds):
        scheduler.add(waiter(Tier.P1))
    released = []
    for _ in range(rounds):
        scheduler.add(waiter(Tier.P0))  # P0 never runs dry
        released.append(scheduler.release_next(0.0).tier)
    assert released.count(Tier.P1) >= int(share * rounds)
    without = Scheduler(NO_AGING)
    without.add(waiter(Tier.P1))
    for _ in range(rounds):
        without.add(waiter(Tier.P0))
        assert without.release_next(0.0).tier is Tier.P0  # what the share protects against


def test_a_long_waiting_p2_is_promoted_ahead_of_newer_p0():
    scheduler = Scheduler(
        QueueConfig(promote_after_seconds=1.0, p1_min_share=0.0, promoted_share=1.0)
    )
    old = waiter(Tier.P2, at=0.0)
    scheduler.add(old)
    scheduler.add(waiter(Tier.P0, at=0.5))
    assert scheduler.release_next(0.9).tier is Tier.P0  # not yet starving
    scheduler.add(waiter(Tier.P0, at=0.95))
    chosen = scheduler.release_next(1.0)
    assert chosen is old and chosen.promoted


def test_a_head_overtaken_often_enough_is_promoted():
    scheduler = Scheduler(
        QueueConfig(
            promote_after_seconds=1e9,
            promote_after_passed_over=3,
            p1_min_share=0.0,
            promoted_share=1.0,
        )
    )
    patient = waiter(Tier.P2)
    scheduler.add(patient)
    released = []
    for _ in range(5):
        scheduler.add(waiter(Tier.P0))
        released.append(scheduler.release_next(0.0))
    assert [w is patient for w in released] == [False, False, False, True, False]


def test_removing_waiters_and_newcomers_queueing_behind_higher_tiers():
    scheduler = Scheduler(NO_AGING)
    gone, stays = waiter(Tier.P1, "a"), waiter(Tier.P1, "b")
    scheduler.add(gone)
    scheduler.add(stays)
    assert scheduler.remove(gone) and not scheduler.remove(gone)
    assert scheduler.waiting(Tier.P1) == 1
    assert scheduler.waiting_at_or_above(Tier.P2) and scheduler.waiting_at_or_above(Tier.P1)
    assert not scheduler.waiting_at_or_above(Tier.P0)
    assert drain(scheduler) == [stays]
    assert scheduler.release_next(0.0) is None


@settings(max_examples=100, deadline=None)
@given(
    promoted=st.sampled_from([0.05, 0.1, 0.25]),
    p1=st.sampled_from([0.0, 0.2]),
    rounds=st.integers(40, 200),
)
def test_p0_keeps_its_share_however_long_everyone_else_has_waited(promoted, p1, rounds):
    scheduler = Scheduler(
        QueueConfig(promote_after_seconds=0.5, promoted_share=promoted, p1_min_share=p1)
    )
    for tier in (Tier.P1, Tier.P2):
        for _ in range(rounds):
            scheduler.add(waiter(tier, at=0.0))  # all of them long past starving
    released = []
    for step in range(rounds):
        scheduler.add(waiter(Tier.P0, at=10.0 + step))
        released.append(scheduler.release_next(10.0 + step).tier)
    assert released.count(Tier.P0) >= int((1 - promoted - p1) * rounds) - 1
    # The starving (the oldest first: here P1's) do move, at their share; a promoted P1
    # release counts towards P1's share too.
    assert len(released) - released.count(Tier.P0) >= int(max(promoted, p1) * rounds) - 1


def test_a_hurried_waiter_goes_first_when_its_wait_ends_sooner():
    scheduler = Scheduler(NO_AGING)
    for i in range(3):
        scheduler.add(Waiter(Tier.P1, "a", i, deadline=i + 5.0))
    late = Waiter(Tier.P1, "b", 3, deadline=9.0, hurried=True)  # ends after a's first
    soon = Waiter(Tier.P1, "c", 4, deadline=4.5, hurried=True)
    sooner = Waiter(Tier.P1, "c", 5, deadline=4.0, hurried=True)  # behind c's own, sooner
    for w in (late, soon, sooner):
        scheduler.add(w)
    order = drain(scheduler)
    assert order[:2] == [sooner, soon]  # earliest deadline first, across arrival order
    assert order.index(late) > 2  # a's first (deadline 5) went before it
    assert len(order) == 6


def test_without_hurried_waiters_the_order_is_unchanged():
    plain, dated = Scheduler(NO_AGING), Scheduler(NO_AGING)
    for i, tenant in enumerate("aabcab"):
        plain.add(waiter(Tier.P2, tenant, at=i))
        dated.add(Waiter(Tier.P2, tenant, i, deadline=10.0 - i))
    assert [w.tenant for w in drain(plain)] == [w.tenant for w in drain(dated)]
