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
from collections.abc import Callable

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.schema import QosConfig, Tier
from sidecar.queueing.peers import PeerRegistry
from sidecar.queueing.scheduler import Scheduler, Waiter
from sidecar.queueing.slots import Slot, SlotTable

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The tier's queue holds its maximum already."""


class AdmissionQueue:
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
        self.slots = slots or SlotTable(clock)
        self.scheduler = Scheduler(config().queue)
        self._futures: dict[Waiter, asyncio.Future[Slot]] = {}
        self._background = Background()
        self.reclaimed = 0

    # -- capacity -------------------------------------------------------------------------

    @property
    def others_in_flight(self) -> int:
        return self._peers.others_in_flight if self._peers else 0

    @property
    def sidecars_alive(self) -> int:
        """This sidecar and the peers whose heartbeat it last saw."""
        return 1 + (self._peers.peers if self._peers else 0)

    @property
    def cluster_in_flight(self) -> int:
        return len(self.slots) + self.others_in_flight

    def free_slots(self) -> int:
        return self._config().fleet.max_concurrency - self.cluster_in_flight

    # -- taking and giving back slots -------------------------------------------------------

    def try_take(self, tier: Tier, tenant: str, stream: bool = False) -> Slot | None:
        """A slot now, if one is free and nobody who goes first is waiting."""
        if self.free_slots() > 0 and not self.scheduler.waiting_at_or_above(tier):
            return self.slots.take(tier, tenant, stream)
        return None

    async def wait(
        self, tier: Tier, tenant: str, max_wait: float, stream: bool = False
    ) -> Slot | None:
        """A slot within `max_wait` seconds, or None."""
        config = self._config()
        if self.scheduler.waiting(tier) >= config.tiers[tier].max_queue_length:
            raise QueueFull
        self.scheduler.config = config.queue
        waiter = Waiter(tier, tenant, self._clock(), stream=stream)
        future: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
        self._futures[waiter] = future
        self.scheduler.add(waiter)
        self.dispatch()
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
            self.scheduler.remove(waiter)
            self._futures.pop(waiter, None)
            if not future.done():
                future.cancel()

    def release(self, slot_id: str) -> Slot | None:
        slot = self.slots.release(slot_id)
        if slot is not None:
            self.dispatch()
        return slot

    def dispatch(self) -> None:
        """Hand free slots to waiters, in the scheduler's order."""
        now = self._clock()
        while self.free_slots() > 0:
            waiter = self.scheduler.release_next(now)
            if waiter is None:
                return
            future = self._futures.pop(waiter, None)
            if future is None or future.done():
                continue
            future.set_result(self.slots.take(waiter.tier, waiter.tenant, waiter.stream))

    # -- background: peers' counts, leases, and capacity that frees up elsewhere -----------

    async def start(self) -> None:
        self._background.start(self._run(), "admission-queue")

    async def stop(self) -> None:
        await self._background.stop()

    async def _run(self) -> None:
        beat_every = max(1, round(0.1 / self._tick))
        for tick in itertools.count():
            await asyncio.sleep(self._tick)
            config = self._config()
            for slot in self.slots.reclaim(config.queue.slot_lease_seconds):
                self.reclaimed += 1
                log.warning("slot taken back after its lease", extra={"slot": slot.id})
            if self._peers is not None and tick % beat_every == 0:
                try:
                    await self._peers.heartbeat(len(self.slots))
                except redis.RedisError as error:
                    redis_errors.note("peers")
                    log.debug("peer heartbeat failed: %s", error)
            self.dispatch()
