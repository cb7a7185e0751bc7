"""The recent admissions every sidecar recorded with its budget calls, read back from
Redis: one call per tier (each tier's records sit in its buckets' slot)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterable
from importlib import resources

import redis.asyncio as redis

from sidecar.config.pools import DEFAULT_POOL
from sidecar.config.schema import Tier
from sidecar.limiter.buckets import tier_bucket_key
from sidecar.overload.admitted import SLOT_MS, Recent, RecentAdmissions, admitted_key

PACKED = 2**20  # a slot's field: blocks * PACKED + requests
_READ = resources.files("sidecar.overload").joinpath("read_admitted.lua").read_text()


class AdmissionRecords:
    def __init__(
        self, client: redis.Redis, pools: Callable[[], Iterable[str]] = lambda: (DEFAULT_POOL,)
    ) -> None:
        self._read = client.register_script(_READ)
        self._pools = pools  # the names of the pools in force

    async def recent(self, newer_than: float, keep: float) -> RecentAdmissions:
        """Per pool, the slots that ended less than `newer_than` seconds ago. The records
        sit in each tier's bucket in each pool, or (for an admission whose first bucket
        is not that, and from sidecars before the buckets held them) in a tier's record
        of its own, whose slots that ended more than `keep` seconds ago are deleted (no
        fresh report is that old)."""
        pools = list(self._pools())
        args: list[str | int] = [SLOT_MS, round(newer_than * 1000), round(keep * 1000), *pools]
        replies = await asyncio.gather(
            *(
                self._read(
                    keys=[
                        admitted_key(tier.value),
                        *(tier_bucket_key(tier.value, pool) for pool in pools),
                    ],
                    args=args,
                )
                for tier in Tier
            )
        )
        # (pool, slot) → [blocks, requests], summed over the tiers, with Redis's clock.
        slots: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0.0, 0.0])
        ages: dict[tuple[str, int], float] = {}
        read_ms = {}
        for tier, reply in zip(Tier, replies, strict=True):
            now_ms, fields = int(reply[0]), reply[1:]
            read_ms[tier.value] = now_ms
            for field, value in zip(fields[::2], fields[1::2], strict=True):
                slot, kind, pool = _text(field).split("|", 2)
                key = (pool, int(slot))
                if kind == "p":  # blocks * 2^20 + requests (token_bucket.lua)
                    blocks, requests = divmod(int(value), PACKED)
                    slots[key][0] += blocks
                    slots[key][1] += requests
                else:  # "b" or "n", as a sidecar before the packed field wrote them
                    slots[key][0 if kind == "b" else 1] += float(value)
                ages[key] = max(0.0, now_ms - (int(slot) + 1) * SLOT_MS) / 1000
        recent: dict[str, list[Recent]] = defaultdict(list)
        for (pool_name, slot_at), (slot_blocks, slot_requests) in slots.items():
            age = ages[pool_name, slot_at]
            recent[pool_name].append(Recent(age, slot_blocks, slot_requests))
        return RecentAdmissions(dict(recent), read_ms)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
