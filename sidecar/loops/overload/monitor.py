"""Keeps the cluster load and the overload shedding state current, in the background.

Every `interval` (100 ms) it reads the fresh pod reports from Redis in one round trip,
and the admissions every sidecar recorded since (one call per tier), aggregates them and
updates the shedding state; requests only read that state. If Redis cannot be read, the
last view is kept until it is older than the reports' TTL, then the load counts as
unknown.

Projection (overload/admitted.py): an admission this sidecar decides counts in its
pool's load at once, from before its budget call (so concurrent decisions see each
other), until the records read from Redis hold it; what it could not record there
counts here until its pods report after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.budget_layout import SLOT_MS
from sidecar.config.base import Tier
from sidecar.config.pools import Pool
from sidecar.config.schema import OverloadConfig, QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.admission_records import AdmissionRecords
from sidecar.loops.overload.admitted import (
    OVERLAP_SECONDS,
    ProjectedAdmission,
    Recent,
    RecentAdmissions,
    admitted_load,
)
from sidecar.loops.overload.load import ClusterLoad, PodLoad, aggregate, pool_of
from sidecar.loops.overload.pace import Pace
from sidecar.loops.overload.priority_check import priority_unconfirmed
from sidecar.loops.overload.refusals import RefusingPods
from sidecar.loops.overload.reports import ReportStore
from sidecar.loops.overload.served import ServedCapacity
from sidecar.loops.overload.shedding import SheddingState, eviction_needed

log = logging.getLogger(__name__)

# After a failed read of the admission records, they are not read for this long.
RECORDS_PAUSE_SECONDS = 1.0
# The longest a read of the records waits for the admissions being recorded when it
# answered (a budget call, a charge behind: each bounded far below this).
SETTLING_SECONDS = 0.25


class LoadMonitor:
    def __init__(
        self,
        store: ReportStore,
        snapshot: Callable[[], Snapshot],
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        gateway_in_flight: Callable[[str | None], int] = lambda _pool: 0,
        records: AdmissionRecords | None = None,
        pace: Callable[[str | None], Pace | None] = lambda _pool: None,
        served: ServedCapacity | None = None,
    ) -> None:
        self._store = store
        self._served = served  # what each pool's engines serve while their queues are full
        self._records = records
        self._gateway_in_flight = gateway_in_flight
        self._pace = pace  # how fast each pool's requests in flight end and start
        self._snapshot = snapshot
        self._interval = interval
        self._clock = clock
        self.state = SheddingState()
        # Pods that may ignore the priority the sidecar sends, by what they report.
        self.priority_unconfirmed: dict[str, list[str]] = {}
        self._read_at = clock()
        self._background = Background()
        # Projection: admissions recorded by every sidecar since the oldest fresh report,
        # per pool, as last read; those decided here not yet in that read; and per pool
        # what both add to the reported load.
        self._recent = RecentAdmissions()
        self._pending: list[ProjectedAdmission] = []
        self._unreported: dict[str, tuple[float, float]] = {}
        self._records_paused_until = float("-inf")
        self._most_running: dict[str, int] = {}  # by pod, of those reporting
        self.refusing = RefusingPods(clock)  # pods refusing at their queue limits
        # Frees a pool's KV blocks by ending streams that may be ended (request/eviction).
        self.evict: Callable[[str, float], object] | None = None
        # Admissions a read waits for (see _until_settled), and its wait.
        self._unsettled: set[ProjectedAdmission] = set()
        self._all_settled: asyncio.Future[None] | None = None

    async def start(self) -> None:
        with contextlib.suppress(redis.RedisError):
            await self.refresh()
        self._background.start(self._run(), "load-monitor")

    async def stop(self) -> None:
        await self._background.stop()

    async def refresh(self) -> None:
        config = self._snapshot().config
        try:
            pods = await self._store.fresh()
            recent = await self._read_recent(pods, config.overload)
        except redis.RedisError:
            # What this sidecar admitted counts no longer than a report would.
            self._forget_projected(RecentAdmissions(), config.overload.report_ttl_seconds)
            if self._clock() - self._read_at < config.overload.report_ttl_seconds:
                raise
            pods, recent = [], RecentAdmissions()  # as stale as a missing report
        else:
            self._read_at = self._clock()
        self._forget_projected(recent, config.overload.report_ttl_seconds)
        self._recent = recent
        before = dict(self.state.shedding)
        self._update(pods)
        self._check_priority(config.engine.send_priority)
        if self.state.shedding != before:
            log.info(
                "overload shedding changed",
                extra={
                    "shedding": {
                        t.value: (r.value if r else None) for t, r in self.state.shedding.items()
                    },
                    "free_kv_ratio": self.state.load.free_kv_ratio,
                    "in_flight": self.state.load.in_flight,
                    "pods": len(self.state.load.pods),
                },
            )

    def snapshot(self) -> Snapshot:
        return self._snapshot()

    def shedding(self) -> SheddingState:
        """The shedding rules in force, as requests read them."""
        return self.state

    async def _read_recent(self, pods: list[PodLoad], overload: OverloadConfig) -> RecentAdmissions:
        """The admissions recorded since the oldest fresh report, per pool. A failed read
        (a master away) counts as none read, so this sidecar's own admissions count until
        their TTL; the records are left alone for a while then: asking a dead master
        every 100 ms would have the cluster client rediscover its slots again and again
        under the budget calls."""
        if self._records is None or not overload.project_admissions or not pods:
            return RecentAdmissions()
        if self._clock() < self._records_paused_until:
            return RecentAdmissions()
        oldest = max(pod.age_seconds for pod in pods)
        newer_than = oldest + OVERLAP_SECONDS + SLOT_MS / 1000
        try:
            read = await self._records.recent(newer_than)
        except Exception as error:  # redis-py may raise more than RedisError mid-reconnect
            redis_errors.note("admission_records")
            log.debug("admission records not read: %s", error)
            self._records_paused_until = self._clock() + RECORDS_PAUSE_SECONDS
            return RecentAdmissions()
        await self._until_settled([p for p in self._pending if not p.settled])
        return read

    async def _until_settled(self, admissions: list[ProjectedAdmission]) -> None:
        """Until `admissions` know whether and when they were recorded. They were being
        recorded (a budget call, a charge behind) when a read answered, so it may hold
        them: used before they know, they would count twice, in the read and as not
        recorded yet, and near a watermark that alone could start shedding."""
        if not admissions:
            return
        self._unsettled = set(admissions)
        self._all_settled = asyncio.get_running_loop().create_future()
        # Past the wait, what is still unsettled counts twice until the next read: the
        # safe side.
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SETTLING_SECONDS):
                    await self._all_settled
        finally:
            self._unsettled, self._all_settled = set(), None

    def _on_settled(self, admission: ProjectedAdmission) -> None:
        unsettled = self._unsettled
        if admission in unsettled:
            unsettled.discard(admission)
            if not unsettled and self._all_settled is not None:
                self._all_settled.set_result(None)

    def project(
        self,
        tier: Tier,
        pool: Pool,
        prompt_tokens: int,
        even_over_budget: bool,
        reported: ClusterLoad,
    ) -> ProjectedAdmission | None:
        """Count an admission being decided in its pool's load at once (`reported`: the
        pool's load as its decision read it; the caller asks only where the configuration
        projects admissions) and confirms or cancels it. None when no pod of the pool
        reports: then its shedding reads no load to add to, and the reports that come
        later hold what was admitted before them."""
        if not (reported.reported or reported).pods:  # as the pods reported it: none
            return None
        block_size = reported.kv_block_size
        load = admitted_load(tier.value, pool.name, prompt_tokens, block_size, even_over_budget)
        projected = ProjectedAdmission(load, self._clock, self._release, self._on_settled)
        self._pending.append(projected)
        self._add(pool.name, load.blocks, 1.0)
        return projected

    def _release(self, projected: ProjectedAdmission) -> None:
        self._add(projected.load.pool, -projected.load.blocks, -1.0)

    def _add(self, pool_name: str, blocks: float, requests: float) -> None:
        """The pool's projection changed by this much: its shedding follows at once."""
        was_blocks, was_requests = self._unreported.get(pool_name, (0.0, 0.0))
        self._unreported[pool_name] = (was_blocks + blocks, was_requests + requests)
        snapshot = self._snapshot()
        pool = snapshot.pools.get(pool_name)
        state = self.state.pools.get(pool_name)
        if pool is None or state is None:
            return
        projected = state.load.plus(*self._unreported[pool_name])
        in_flight = self._gateway_in_flight(pool_name)
        state.update(projected, snapshot.config, in_flight, pool, state.pace)

    def _forget_projected(self, read: RecentAdmissions, ttl: float) -> None:
        """Drop what the read just done holds, what was cancelled, and what is older than
        any fresh report could be."""
        now = self._clock()
        self._pending = [
            projected
            for projected in self._pending
            if not projected.cancelled
            and now - projected.at < ttl
            and not read.holds(projected.load.tier, projected.recorded_us)
        ]

    def _recent_in(self, pool: str | None) -> list[Recent]:
        """The admissions not yet in every report: as read, and those projected here (still
        being decided: as new; not recorded in Redis: by their age)."""
        now = self._clock()
        recent = [
            entry
            for name, entries in self._recent.by_pool.items()
            if pool is None or name == pool
            for entry in entries
        ]
        for projected in self._pending:
            if pool is None or projected.load.pool == pool:
                counted_anyway = projected.confirmed_at is None or projected.recorded_us > 0
                age = 0.0 if counted_anyway else now - projected.at
                recent.append(Recent(age, projected.load.blocks, 1.0))
        return recent

    def _check_priority(self, send_priority: bool) -> None:
        unconfirmed = priority_unconfirmed(self.state.load.pods, send_priority)
        if unconfirmed == self.priority_unconfirmed:
            return
        self.priority_unconfirmed = unconfirmed
        if unconfirmed:
            log.warning(
                "engine.send_priority is on, but these pods do not report priority "
                "scheduling: vLLM under fcfs ignores the tiers' priority. Start vLLM with "
                "--scheduling-policy priority and its reporter with the same flag.",
                extra={"pods_by_policy": unconfirmed},
            )

    def reevaluate(self) -> None:
        """Apply a new configuration to the load last read, without waiting for the next
        read (thresholds and limits changed)."""
        self._update(self.state.load.as_reported.pods)

    def _update(self, pods: Iterable[PodLoad]) -> None:
        """The state over all pods, and each pool's over its own pods, projected."""
        snapshot = self._snapshot()
        config, pools = snapshot.config, snapshot.pools
        pods = self.refusing.marked(tuple(pods), config.overload.refusal_hold_seconds)
        self._most_running = {
            pod.pod_id: max(pod.running, self._most_running.get(pod.pod_id, 0)) for pod in pods
        }
        self.state.update(
            self._projected(aggregate(pods, self._most_running), None),
            config,
            self._gateway_in_flight(None),
            pace=self._pace(None),
        )
        by_pool: dict[str, list[PodLoad]] = {pool.name: [] for pool in pools}
        for pod in pods:
            name = pool_of(pod, pools)
            if name is not None:
                by_pool[name].append(pod)
        states = {}
        for pool in pools:
            state = self.state.pools.get(pool.name) or SheddingState()
            load = self._projected(aggregate(by_pool[pool.name], self._most_running), pool.name)
            in_flight, pace = self._gateway_in_flight(pool.name), self._pace(pool.name)
            state.update(load, config, in_flight, pool, pace)
            state.served = self._served_in(pool, by_pool[pool.name], state, config)
            states[pool.name] = state
            blocks = eviction_needed(state, pool, config)
            if blocks > 0 and self.evict is not None:
                self.evict(pool.name, blocks)
        self.state.pools = states

    def _served_in(
        self, pool: Pool, pods: list[PodLoad], state: SheddingState, config: QosConfig
    ) -> float | None:
        """What the pool's engines were measured to serve lately, while every pod held
        requests waiting (or refused them at its queue limits); None when not measured."""
        if self._served is None or not config.fleet.follow_served_capacity:
            return None
        full = bool(pods) and all(pod.waiting > 0 or pod.refusing for pod in pods)
        return self._served.observe(pool.name, full, state.figure(pool))

    def _projected(self, load: ClusterLoad, pool: str | None) -> ClusterLoad:
        # No pod reports: nothing to project onto (the admissions projected here wait for one).
        recent = self._recent_in(pool) if load.as_reported.pods else []
        unreported = load.unreported_in(recent)
        if pool is not None:
            self._unreported[pool] = unreported
        return load.plus(*unreported)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.refresh()
            except redis.RedisError as error:
                redis_errors.note("load_reports")
                log.debug("pod reports not read: %s", error)
            except Exception:  # the loop must outlive anything a client library raises
                redis_errors.note("load_reports")
                log.exception("reading the load failed")
