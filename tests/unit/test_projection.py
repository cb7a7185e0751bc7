"""Projected load between pod reports: what admissions add, which report forgets them,
and how the monitor counts its own decisions at once without counting them twice. Pure:
the report store and the admission records are stand-ins."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.config.base import Tier
from sidecar.config.pools import Pool
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.admitted import (
    OVERLAP_SECONDS,
    ProjectedAdmission,
    Recent,
    RecentAdmissions,
    admitted_load,
)
from sidecar.loops.overload.load import PodLoad, aggregate
from sidecar.loops.overload.monitor import SETTLING_SECONDS, LoadMonitor
from sidecar.loops.overload.pace import Pace
from sidecar.refusals import Reason
from sidecar.request.admission.director import AdmissionDirector
from sidecar.request.admission.identity import IdentityResolver
from sidecar.request.bodies.tokens import estimate
from sidecar.request.policy.decision import Admit
from tests.unit.clock import Clock
from tests.unit.test_admission_decider import TENANTS, FakeLimiter, chat, lookup


def test_an_admission_takes_the_blocks_of_its_prompt_and_first_token():
    assert admitted_load("p2", "default", 16, 16).blocks == 2  # 17 tokens
    assert admitted_load("p2", "default", 15, 16).blocks == 1
    assert admitted_load("p2", "default", 0, 16).blocks == 1
    assert admitted_load("p1", "default", 100, 1).blocks == 101  # servers counting tokens


def test_each_pod_counts_its_share_of_what_was_admitted_since_its_own_report():
    small = PodLoad("small", 0.5, 1000, 2, 0, age_seconds=0.30)
    big = PodLoad("big", 0.5, 3000, 6, 0, age_seconds=0.10)
    load = aggregate([small, big])
    recent = [Recent(0.05, 40, 4), Recent(0.20, 80, 8), Recent(0.50, 1000, 100)]
    blocks, requests = load.unreported_in(recent)
    # small (a quarter of the blocks) has not reported the 0.05 and 0.20 s old ones; big
    # reported after 0.20 s (and after the 0.5 s old slot), not after the 0.05 s one.
    assert blocks == pytest.approx(0.25 * (40 + 80) + 0.75 * 40)
    assert requests == pytest.approx(0.25 * 12 + 0.75 * 4)
    # A report received just after an admission may not show it yet: still counted.
    just_after = [Recent(0.10 + OVERLAP_SECONDS / 2, 40, 4)]
    assert load.unreported_in(just_after)[0] == pytest.approx(40)


def test_projected_free_kv_and_in_flight_keep_the_reported_view():
    load = aggregate([PodLoad("a", 0.8, 2000, 10, 2)])
    projected = load.plus(100, 50)
    assert projected.free_kv_ratio == pytest.approx(0.20 - 100 / 2000)
    assert projected.in_flight == 12 + 50
    assert projected.as_reported.free_kv_ratio == pytest.approx(0.20)
    assert projected.plus(0, 0).free_kv_ratio == pytest.approx(0.20)  # from the reports
    # Pods that do not say their block count: free KV cannot move, in flight still does.
    unknown = aggregate([PodLoad("a", 0.8, 0, 10, 2)]).plus(100, 50)
    assert unknown.free_kv_ratio == pytest.approx(0.20) and unknown.in_flight == 62


class Reports:
    def __init__(self, *pods: PodLoad) -> None:
        self.pods = list(pods)

    async def fresh(self) -> list[PodLoad]:
        return self.pods


class Records:
    """The admission records as a read finds them, read at Redis time `read_us`."""

    def __init__(self) -> None:
        self.entries: dict[str, list[Recent]] = {}
        self.read_us = 0

    async def recent(self, newer_than: float) -> RecentAdmissions:
        return RecentAdmissions(self.entries, dict.fromkeys(("p0", "p1", "p2"), self.read_us))


POOL = Snapshot(1).pools.default


async def monitor_at(
    free: float, records: Records, clock: Clock, pace: Pace | None = None
) -> LoadMonitor:
    """A monitor that has read one pod of 2 000 blocks, `free` of them free, 0.1 s ago;
    `pace`: how fast requests in flight end and start, as the queue would say."""
    snapshot = Snapshot(1)
    reports = Reports(PodLoad("a", 1 - free, 2000, 0, 0, age_seconds=0.1, kv_block_size=16))
    monitor = LoadMonitor(
        reports,  # type: ignore[arg-type]
        lambda: snapshot,
        clock=clock,
        records=records,  # type: ignore[arg-type]
        pace=lambda _pool: pace,
    )
    await monitor.refresh()
    return monitor


def project(monitor: LoadMonitor, pool: Pool) -> ProjectedAdmission | None:
    """A 16-token P2 prompt being decided, against its pool's load as the decision read it."""
    reported = monitor.state.for_pool(pool.name).load
    return monitor.project(Tier.P2, pool, 16, False, reported)


def admit(monitor: LoadMonitor, recorded_us: int) -> None:
    """A 16-token P2 prompt decided and admitted (two blocks)."""
    held = project(monitor, POOL)
    assert held is not None
    held.confirm(recorded_us)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.mark.asyncio
async def test_own_admissions_count_at_once_and_stop_a_burst_at_the_watermark(clock):
    monitor = await monitor_at(0.20, Records(), clock)
    admitted = 0
    while monitor.state.for_pool(POOL.name).shedding[Tier.P2] is None and admitted < 300:
        admit(monitor, recorded_us=1)
        admitted += 1
    # 100 blocks between 20 % and 15 % free, 2 blocks each: the 50th reaches the line
    # (floating point may put it a hair under), the 51st would take it under.
    assert admitted in (50, 51)
    state = monitor.state.for_pool(POOL.name)
    assert state.shedding[Tier.P2] is Reason.SHED_KV_WATERMARK
    assert state.load.unreported_blocks == 2 * admitted and state.load.in_flight == admitted


@pytest.mark.asyncio
async def test_a_shed_tier_stays_foreseen_back_while_admissions_move_the_projection(clock):
    monitor = await monitor_at(0.10, Records(), clock, pace=Pace({Tier.P2: 40}, {Tier.P2: 4.0}, {}))
    state = monitor.state.for_pool(POOL.name)
    assert state.shedding[Tier.P2] is Reason.SHED_KV_WATERMARK
    before = state.recovery[Tier.P2]
    assert before is not None
    admit(monitor, recorded_us=1)  # the projection moves between two reads
    assert state.recovery[Tier.P2] is not None and state.recovery[Tier.P2] > before


@pytest.mark.asyncio
async def test_a_cancelled_admission_gives_its_projection_back(clock):
    monitor = await monitor_at(0.16, Records(), clock)
    state = monitor.state.for_pool(POOL.name)
    held = [project(monitor, POOL) for _ in range(12)]
    assert state.shedding[Tier.P2] is Reason.SHED_KV_WATERMARK
    for each in held:
        assert each is not None
        each.cancel()
    assert state.load.unreported_blocks == 0
    assert state.load.free_kv_ratio == pytest.approx(0.16)
    # Hysteresis: P2 comes back 2 points above the line, at 17 %, not at 16 %.
    assert state.shedding[Tier.P2] is Reason.SHED_KV_WATERMARK


@pytest.mark.asyncio
async def test_recorded_admissions_count_once_from_redis_and_go_with_a_newer_report(clock):
    records = Records()
    monitor = await monitor_at(0.20, records, clock)
    for recorded_us in range(1000, 1010):
        admit(monitor, recorded_us)
    clock.now += 0.01
    # A read made while the last of them was being recorded holds the nine before it
    # (and 5 more from another sidecar): each counted once.
    records.entries = {"default": [Recent(0.0, 28, 14)]}
    records.read_us = 1009
    await monitor.refresh()
    assert monitor.state.for_pool(POOL.name).load.unreported_blocks == 28 + 2
    records.entries = {"default": [Recent(0.0, 30, 15)]}
    records.read_us = 1010
    await monitor.refresh()
    assert monitor.state.for_pool(POOL.name).load.unreported_blocks == 30
    # An admission this sidecar could not record (Redis away) counts until a report
    # newer than it: the pod's report is 0.1 s old, so one 0.2 s old is forgotten.
    admit(monitor, recorded_us=0)
    records.entries = {}
    await monitor.refresh()
    assert monitor.state.for_pool(POOL.name).load.unreported_blocks == 2
    clock.now += 0.2
    await monitor.refresh()
    assert monitor.state.for_pool(POOL.name).load.unreported_blocks == 0


@pytest.mark.parametrize("on", [True, False])
@pytest.mark.asyncio
async def test_projection_can_be_switched_off(clock, on):
    config = QosConfig.from_partial({"overload": {"project_admissions": on}})
    snapshot = Snapshot(1, config, TENANTS)
    reports = Reports(PodLoad("a", 0.5, 2000, 0, 0, kv_block_size=16))
    monitor = LoadMonitor(reports, lambda: snapshot, clock=clock, records=Records())  # type: ignore[arg-type]
    await monitor.refresh()
    decider = AdmissionDirector(
        lambda: snapshot,
        IdentityResolver(lookup),
        FakeLimiter(),
        estimate,
        shedding=lambda: monitor.state,
        projection=monitor,
    )
    decision = await decider.decide(chat("k-p2"))
    assert isinstance(decision, Admit)
    projected = monitor.state.for_pool(POOL.name).load.unreported_blocks
    assert (projected > 0) is on


@pytest.mark.asyncio
async def test_a_pool_whose_pods_do_not_report_projects_nothing_until_one_does(clock):
    snapshot = Snapshot(1)
    reports = Reports()
    monitor = LoadMonitor(reports, lambda: snapshot, clock=clock, records=Records())  # type: ignore[arg-type]
    await monitor.refresh()
    assert project(monitor, POOL) is None
    assert monitor.state.for_pool(POOL.name).load.unreported_blocks == 0
    reports.pods.append(PodLoad("a", 0.5, 2000, 0, 0, kv_block_size=16))
    await monitor.refresh()
    admit(monitor, recorded_us=1)
    assert monitor.state.for_pool(POOL.name).load.unreported_blocks == 2


@pytest.mark.asyncio
async def test_an_admission_charged_behind_counts_once_its_record_is_read(clock):
    records = Records()
    monitor = await monitor_at(0.20, records, clock)
    held = project(monitor, POOL)
    assert held is not None
    held.confirm(0, recorded_later=True)  # from headroom: charge and record come behind
    clock.now += 0.3  # older than the pod's report: it would be forgotten unrecorded...
    held.recorded(1500)  # ...but its charge recorded it, so it counts until read
    await monitor.refresh()
    assert monitor.state.for_pool(POOL.name).load.unreported_blocks == 2
    records.entries = {"default": [Recent(0.0, 2, 1)]}
    records.read_us = 1501
    await monitor.refresh()  # read back with the records: counted once, from there
    assert monitor.state.for_pool(POOL.name).load.unreported_blocks == 2


def unreported_blocks(monitor: LoadMonitor) -> float:
    return monitor.state.for_pool(POOL.name).load.unreported_blocks


def deciding(monitor: LoadMonitor) -> ProjectedAdmission:
    """A two-block P2 admission being decided."""
    held = project(monitor, POOL)
    assert held is not None
    return held


async def read_holding_one(clock: Clock) -> tuple[LoadMonitor, ProjectedAdmission]:
    """A monitor deciding one admission, and a read of the records that holds it (its
    budget call or its charge ran in Redis at 1 500 µs; the read answered at 1 501 µs)."""
    records = Records()
    monitor = await monitor_at(0.20, records, clock)
    held = deciding(monitor)
    records.entries = {"default": [Recent(0.0, 2, 1)]}
    records.read_us = 1501
    return monitor, held


async def refreshing(monitor: LoadMonitor) -> asyncio.Task[None]:
    """A refresh whose read has answered and that still waits (it is not done)."""
    refresh = asyncio.create_task(monitor.refresh())
    done, _ = await asyncio.wait([refresh], timeout=SETTLING_SECONDS / 5)
    assert not done, "the read was used before the admissions in it were settled"
    return refresh


@pytest.mark.asyncio
async def test_a_read_answering_while_an_admission_is_recorded_waits_for_its_time(clock):
    # Used at once, the read would count it twice: in the read, and as being decided.
    monitor, held = await read_holding_one(clock)
    refresh = await refreshing(monitor)
    held.confirm(1500)  # its budget call answers after the read did
    await refresh
    assert unreported_blocks(monitor) == 2


@pytest.mark.asyncio
async def test_a_read_answering_before_a_charge_behind_waits_for_its_record(clock):
    monitor, held = await read_holding_one(clock)
    held.confirm(0, recorded_later=True)  # from headroom
    refresh = await refreshing(monitor)
    held.recorded(1500)  # its charge answers after the read did
    await refresh
    assert unreported_blocks(monitor) == 2
    # A charge recorded after the read is not in it: counted as this sidecar's own.
    other = deciding(monitor)
    other.confirm(0, recorded_later=True)
    refresh = await refreshing(monitor)
    other.recorded(1502)
    await refresh
    assert unreported_blocks(monitor) == 2 + 2


@pytest.mark.asyncio
async def test_an_admission_that_never_settles_holds_a_read_back_only_so_long(clock):
    monitor, held = await read_holding_one(clock)
    await asyncio.wait_for(monitor.refresh(), SETTLING_SECONDS * 20)
    assert unreported_blocks(monitor) == 2 + 2  # both ways until decided: the safe side
    held.confirm(1500)  # late: the next read knows it holds it
    await monitor.refresh()
    assert unreported_blocks(monitor) == 2
