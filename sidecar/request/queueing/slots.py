"""In-flight slots: taken when a request is admitted, given back exactly once when its
HTTP exchange ends. Local to this sidecar; peers learn its count through Redis."""

from __future__ import annotations

import itertools
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from sidecar.config.base import Tier
from sidecar.config.pools import DEFAULT_POOL
from sidecar.request.policy.cost import Reservation


@dataclass(frozen=True)
class Slot:
    id: str
    tier: Tier
    tenant: str
    taken_at: float
    stream: bool = False
    pool: str = DEFAULT_POOL
    reservation: Reservation | None = None  # what it reserved, settled when it ends


class SlotTable:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, owner: str | None = None
    ) -> None:
        # Slot ids name this process, so an end reported to another sidecar is not
        # mistaken for one of its own.
        self.owner = owner or secrets.token_hex(4)
        self._clock = clock
        self._numbers = itertools.count(1)
        self._slots: dict[str, Slot] = {}
        self._held: Counter[tuple[str, Tier]] = Counter()  # by pool and tier
        self._in_pool: Counter[str] = Counter()  # by pool: read on every admission
        self.released = 0

    def __len__(self) -> int:
        return len(self._slots)

    def by_tier(self) -> Counter[Tier]:
        return Counter(slot.tier for slot in self._slots.values())

    def by_pool(self) -> Counter[str]:
        return self._in_pool.copy()

    def in_pool(self, pool: str) -> int:
        return self._in_pool[pool]

    def by_pool_and_tier(self) -> Counter[tuple[str, Tier]]:
        return +self._held  # without the zeros

    def held(self, pool: str, tier: Tier) -> int:
        return self._held.get((pool, tier), 0)

    def take(
        self,
        tier: Tier,
        tenant: str,
        stream: bool = False,
        pool: str = DEFAULT_POOL,
        reservation: Reservation | None = None,
    ) -> Slot:
        # Unguessable past its owner: only the exchange's own access-log entry names it.
        slot_id = f"{self.owner}-{next(self._numbers)}-{secrets.token_hex(6)}"
        slot = Slot(slot_id, tier, tenant, self._clock(), stream, pool, reservation)
        self._slots[slot.id] = slot
        self._held[slot.pool, slot.tier] += 1
        self._in_pool[slot.pool] += 1
        return slot

    def release(self, slot_id: str) -> Slot | None:
        """Give a slot back; None if it is not ours or was given back already."""
        slot = self._slots.pop(slot_id, None)
        if slot is not None:
            self.released += 1
            self._held[slot.pool, slot.tier] -= 1
            self._in_pool[slot.pool] -= 1
        return slot

    def reclaim(self, older_than: float) -> list[Slot]:
        """Take back slots held longer than a lease: their end was never reported."""
        cutoff = self._clock() - older_than
        stale = [slot for slot in self._slots.values() if slot.taken_at < cutoff]
        for slot in stale:
            del self._slots[slot.id]
            self._held[slot.pool, slot.tier] -= 1
            self._in_pool[slot.pool] -= 1
        return stale
