"""The admission queue: requests wait here for a slot, released by the scheduler's order.

A request takes a slot at once when one is free and nobody of its tier or above is
waiting; otherwise it waits, at most its tier's max wait. Slots free up when Envoy reports
an exchange's end; the queue then releases waiters while the cluster has free slots. A
waiter whose client goes away leaves the queue at once; a released waiter whose client
went away in the same instant gives its slot straight back.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Iterable

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.base import TIERS, Tier
from sidecar.config.pools import DEFAULT_POOL, Pool, Pools
from sidecar.config.pools import resolve as resolve_pools
from sidecar.config.schema import QosConfig
from sidecar.loops.overload.pace import Pace
from sidecar.request.policy.cost import Reservation
from sidecar.request.queueing.forecast import (
    EventRate,
    FirstTokenTimes,
    HoldTimes,
    foreseen_wait,
)
from sidecar.request.queueing.peers import PeerRegistry
from sidecar.request.queueing.scheduler import Scheduler, Waiter
from sidecar.request.queueing.slots import Slot, SlotTable

log = logging.getLogger(__name__)
RECLAIM_EVERY_SECONDS = 1.0


class QueueFull(Exception):
    """The tier's queue holds its maximum already."""


class AdmissionQueue:
    """Slots and waiters per model pool: each pool has its own concurrency limit and its
    own release order; a request waits only for its pool's slots."""

    def __init__(
        self,
        config: Callable[[], QosConfig],
        slots: SlotTable | None = None,
        peers: PeerRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        tick_seconds: float = 0.05,
    ) -> None:
        self._config = config
        self._peers = peers
        self._clock = clock
        self._tick = tick_seconds
        # An empty table is falsy (it has a length): test for None, or its owner is lost.
        self.slots = slots if slots is not None else SlotTable(clock)
        self.schedulers: dict[str, Scheduler] = {}
        self._pools: dict[str, Pool] = {}  # the latest settings of each pool seen
        self._resolved: tuple[QosConfig, Pools] | None = None
        self._futures: dict[Waiter, tuple[asyncio.Future[Slot], str]] = {}
        self._release_rates: dict[str, EventRate] = {}
        self._take_rates: dict[tuple[str, Tier], EventRate] = {}
        self._holds: dict[tuple[str, Tier], HoldTimes] = {}
        # Fed by the ends of timed streams, read by the first-token forecast.
        self.first_tokens = FirstTokenTimes(clock)
        self._background = Background()
        self.reclaimed = 0

    @property
    def scheduler(self) -> Scheduler:
        """The default pool's release order."""
        return self._scheduler(DEFAULT_POOL)

    def _scheduler(self, pool: str) -> Scheduler:
        if pool not in self.schedulers:
            self.schedulers[pool] = Scheduler(self._config().queue)
        return self.schedulers[pool]

    def _pool(self, pool: Pool | None) -> Pool:
        """`pool` (remembered for releases), or the configuration's default pool."""
        if pool is None:
            config = self._config()
            if self._resolved is None or self._resolved[0] is not config:
                self._resolved = (config, resolve_pools(config))
            pool = self._resolved[1].default
        self._pools[pool.name] = pool
        self._release_rate(pool.name)  # its rate is over the time since it was first seen
        return pool

    # -- capacity -------------------------------------------------------------------------

    @property
    def others_in_flight(self) -> int:
        return self._peers.others_in_flight if self._peers else 0

    def sidecars_alive(self) -> int:
        """This sidecar and the peers whose heartbeat it last saw."""
        return 1 + (self._peers.peers if self._peers else 0)

    def cluster_by_tier(self, tier: Tier) -> tuple[int, int]:
        """Slots held and requests waiting in `tier`, by every sidecar (as of the last
        heartbeat, a tenth of a second ago at most)."""
        peers = self._peers
        held = self.slots.by_tier()[tier] + (
            peers.others_in_tier.get(tier.value, 0) if peers else 0
        )
        waiting = self.scheduler.waiting(tier)
        waiting += peers.others_waiting.get(tier.value, 0) if peers else 0
        return held, waiting

    @property
    def cluster_in_flight(self) -> int:
        return len(self.slots) + self.others_in_flight

    def cluster_in_flight_in(self, pool: str | None) -> int:
        """Slots held in `pool` by every sidecar (None: in every pool)."""
        if pool is None:
            return self.cluster_in_flight
        others = self._peers.others_in_pool.get(pool, 0) if self._peers else 0
        return self.slots.in_pool(pool) + others

    def cluster_held_in(self, pool: str, tiers: Iterable[Tier]) -> int:
        """Slots held in `pool` at `tiers` by every sidecar."""
        others = self._peers.others_held if self._peers else {}
        return sum(self.slots.held(pool, t) + others.get((pool, t.value), 0) for t in tiers)

    def local_share(self, pool: str) -> float:
        """This sidecar's share of the slots held in `pool` by every sidecar."""
        return self.slots.in_pool(pool) / max(1, self.cluster_in_flight_in(pool))

    def release_rate(self, pool: str) -> float | None:
        """Slots given back in `pool` per second lately; None while too few to tell."""
        return self._release_rate(pool).per_second()

    def pace(self, pool: str | None) -> Pace | None:
        """How long requests in flight in `pool` (None: in every pool) are held and how
        fast they start lately, by tier, over this sidecar's own slots; None while nothing
        is held or none was given back lately."""
        names = [name for name in self._release_rates if pool is None or name == pool]
        held = {tier: sum(self.slots.held(name, tier) for name in names) for tier in TIERS}
        holds: dict[Tier, float | None] = {}
        taken = dict.fromkeys(TIERS, 0.0)
        for tier in TIERS:
            ended = [self._holds[name, tier].sum_and_count() for name in names]
            seconds, count = sum(s for s, _ in ended), sum(n for _, n in ended)
            holds[tier] = seconds / count if count else None
            taken[tier] = sum(self._take_rates[name, tier].per_second() or 0.0 for name in names)
        if not sum(held.values()) or not any(holds.values()):
            return None
        return Pace(held, holds, taken)

    def free_slots(self, pool: Pool | None = None) -> int:
        return self._free_in(self._pool(pool))

    def _free_in(self, pool: Pool) -> int:
        return pool.fleet.max_concurrency - self.cluster_in_flight_in(pool.name)

    # -- taking and giving back slots -------------------------------------------------------

    def try_take(
        self,
        tier: Tier,
        tenant: str,
        stream: bool = False,
        pool: Pool | None = None,
        reservation: Reservation | None = None,
    ) -> Slot | None:
        """A slot now, if one is free and nobody who goes first is waiting."""
        pool = self._pool(pool)  # resolved once: free_slots() would resolve it again
        if self._free_in(pool) > 0 and not self._scheduler(pool.name).waiting_at_or_above(tier):
            return self._take(tier, tenant, stream, pool.name, reservation)
        return None

    async def wait(
        self,
        tier: Tier,
        tenant: str,
        max_wait: float,
        stream: bool = False,
        pool: Pool | None = None,
        reservation: Reservation | None = None,
        hurried: bool = False,
    ) -> Slot | None:
        """A slot within `max_wait` seconds, or None. A `hurried` waiter (its client asked
        to wait less than its tier allows) goes before its tier's others whose wait ends
        later than its own."""
        pool = self._pool(pool)
        scheduler = self._scheduler(pool.name)
        if scheduler.waiting(tier) >= pool.tiers[tier].max_queue_length:
            raise QueueFull
        scheduler.config = self._config().queue
        now = self._clock()
        waiter = Waiter(
            tier, tenant, now, stream, reservation, deadline=now + max_wait, hurried=hurried
        )
        future: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
        self._futures[waiter] = (future, pool.name)
        scheduler.add(waiter)
        self.dispatch(pool.name)
        try:
            async with asyncio.timeout(max_wait):
                return await future
        except TimeoutError:
            # Released in the very instant the time ran out: the slot is the waiter's.
            return future.result() if future.done() and not future.cancelled() else None
        except asyncio.CancelledError:
            # The client went away. A slot handed over in the same instant goes back.
            if future.done() and not future.cancelled():
                self.release(future.result().id)
            raise
        finally:
            scheduler.remove(waiter)
            self._futures.pop(waiter, None)
            if not future.done():
                future.cancel()

    def release(self, slot_id: str) -> Slot | None:
        slot = self.slots.release(slot_id)
        if slot is not None:
            self._release_rate(slot.pool).note()
            self._holds[slot.pool, slot.tier].note(self._clock() - slot.taken_at)
            self.dispatch(slot.pool)
        return slot

    def cancel(self, slot_id: str) -> None:
        """Give back a slot its request never used (no release the engines made)."""
        slot = self.slots.release(slot_id)
        if slot is not None:
            self.dispatch(slot.pool)

    def _release_rate(self, pool: str) -> EventRate:
        if pool not in self._release_rates:
            self._release_rates[pool] = EventRate(self._clock)
            for tier in TIERS:
                self._take_rates[pool, tier] = EventRate(self._clock)
                self._holds[pool, tier] = HoldTimes(self._clock)
        return self._release_rates[pool]

    def foreseen_wait(self, tier: Tier, pool: Pool | None = None) -> float | None:
        """Seconds a newcomer of `tier` would wait for a slot of `pool` (forecast.py);
        None until the pool's releases tell, or with forecasts off."""
        if not self._config().queue.foresee_waits:
            return None
        pool = self._pool(pool)
        return foreseen_wait(self._scheduler(pool.name), tier, self._release_rate(pool.name))

    def dispatch(self, pool_name: str | None = None) -> None:
        """Hand free slots to waiters, in each pool's scheduler's order (one pool's only,
        when named)."""
        now = self._clock()
        names = list(self.schedulers) if pool_name is None else [pool_name]
        for name in names:
            pool = self._pools.get(name)
            scheduler = self.schedulers.get(name)
            if pool is None or scheduler is None:
                continue
            while self.free_slots(pool) > 0:
                waiter = scheduler.release_next(now)
                if waiter is None:
                    break
                entry = self._futures.pop(waiter, None)
                if entry is None or entry[0].done():
                    continue
                slot = self._take(
                    waiter.tier, waiter.tenant, waiter.stream, name, waiter.reservation
                )
                entry[0].set_result(slot)

    def _take(
        self, tier: Tier, tenant: str, stream: bool, pool: str, reservation: Reservation | None
    ) -> Slot:
        self._release_rate(pool)  # the pool's rates, from when it was first seen
        self._take_rates[pool, tier].note()
        return self.slots.take(tier, tenant, stream, pool, reservation)

    # -- background: peers' counts, leases, and capacity that frees up elsewhere -----------

    async def start(self) -> None:
        self._background.start(self._run(), "admission-queue")

    async def stop(self) -> None:
        await self._background.stop()

    async def _run(self) -> None:
        beat_every = max(1, round(0.1 / self._tick))
        # Leases run for minutes: a walk over every slot held once a second is plenty.
        reclaim_every = max(1, round(RECLAIM_EVERY_SECONDS / self._tick))
        for tick in itertools.count():
            await asyncio.sleep(self._tick)
            config = self._config()
            if tick % reclaim_every == 0:
                for slot in self.slots.reclaim(config.queue.slot_lease_seconds):
                    self.reclaimed += 1
                    log.warning("slot taken back after its lease", extra={"slot": slot.id})
            if self._peers is not None and tick % beat_every == 0:
                try:
                    by_tier = {t.value: n for t, n in self.slots.by_tier().items()}
                    waiting = {t.value: self.scheduler.waiting(t) for t in Tier}
                    held = {(p, t.value): n for (p, t), n in self.slots.by_pool_and_tier().items()}
                    await self._peers.heartbeat(self.slots.by_pool(), 1.0, by_tier, waiting, held)
                except redis.RedisError as error:
                    redis_errors.note("peers")
                    log.debug("peer heartbeat failed: %s", error)
            self.dispatch()
