"""The recent admissions every sidecar recorded with its budget calls, read back from
Redis: one call per tier (each tier's records sit in its buckets, one slot)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterable
from importlib import resources

import redis.asyncio as redis

from sidecar.budget_layout import PACKED, SLOT_MS, tier_bucket_key
from sidecar.config.base import Tier
from sidecar.config.pools import DEFAULT_POOL
from sidecar.loops.overload.admitted import Recent, RecentAdmissions

_READ = resources.files("sidecar.loops.overload").joinpath("read_admitted.lua").read_text()


class AdmissionRecords:
    def __init__(
        self, client: redis.Redis, pools: Callable[[], Iterable[str]] = lambda: (DEFAULT_POOL,)
    ) -> None:
        self._read = client.register_script(_READ)
        self._pools = pools  # the names of the pools in force

    async def recent(self, newer_than: float) -> RecentAdmissions:
        """Per pool, the slots that ended less than `newer_than` seconds ago, from each
        tier's bucket in each pool."""
        pools = list(self._pools())
        args: list[str | int] = [SLOT_MS, round(newer_than * 1000), *pools]
        replies = await asyncio.gather(
            *(
                self._read(keys=[tier_bucket_key(tier.value, pool) for pool in pools], args=args)
                for tier in Tier
            )
        )
        # (pool, slot) → [blocks, requests], summed over the tiers, with Redis's clock.
        slots: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
        ages: dict[tuple[str, int], float] = {}
        read_us = {}
        for tier, reply in zip(Tier, replies, strict=True):
            now_us, fields = int(reply[0]), reply[1:]
            read_us[tier.value] = now_us
            for pool, slot, value in zip(fields[::3], fields[1::3], fields[2::3], strict=True):
                key = (_text(pool), int(slot))
                blocks, requests = divmod(int(value), PACKED)
                slots[key][0] += blocks
                slots[key][1] += requests
                ages[key] = max(0.0, now_us / 1000 - (int(slot) + 1) * SLOT_MS) / 1000
        recent: dict[str, list[Recent]] = defaultdict(list)
        for (pool_name, slot_at), (slot_blocks, slot_requests) in slots.items():
            age = ages[pool_name, slot_at]
            recent[pool_name].append(Recent(age, slot_blocks, slot_requests))
        return RecentAdmissions(dict(recent), read_us)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
