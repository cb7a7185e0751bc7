"""Token buckets in Redis, taken by one atomic Lua script per decision."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

import redis.asyncio as redis

from sidecar.budget_layout import RECORD_EXPIRE_MS, SLOT_MS, AdmittedLoad, tier_bucket_key
from sidecar.config.base import Tier
from sidecar.redis_multiplexed import MultiplexedRedis
from sidecar.request.limiter.buckets import (
    Alternative,
    BucketSpec,
    Charged,
    FairShare,
    Verdict,
)

_LUA = resources.files("sidecar.request.limiter")


def _joined(*names: str) -> str:
    """One script of the Lua files, in order: each defines what the later ones use."""
    return "\n".join(_LUA.joinpath(name).read_text() for name in names)


# The bucket's arithmetic and the argument protocol first, then what the script uses.
SCRIPT = _joined(
    "bucket_level.lua",
    "arguments.lua",
    "fair_entry.lua",
    "fair_share.lua",
    "admission_record.lua",
    "token_bucket.lua",
)
SETTLE = _joined("bucket_level.lua", "arguments.lua", "fair_entry.lua", "settle.lua")
CHARGE = _joined(
    "bucket_level.lua",
    "arguments.lua",
    "fair_entry.lua",
    "fair_share.lua",
    "admission_record.lua",
    "charge.lua",
)


class RedisTokenBuckets:
    """EVALSHA, reloading the script on NOSCRIPT (restart, failover, SCRIPT FLUSH)."""

    def __init__(self, client: redis.Redis, calls: MultiplexedRedis | None = None) -> None:
        # Both kinds of script send EVALSHA and, on NOSCRIPT, load the script and retry;
        # `calls`, when given, carries the per-decision ones (a connection they share).
        self._client = client
        scripts = calls.script if calls is not None else client.register_script
        self._script = scripts(SCRIPT)
        self._settle = scripts(SETTLE)
        self._charge = scripts(CHARGE)

    async def warm(self) -> None:
        """Load the scripts (on every master of a cluster): a master that came back empty
        would otherwise answer NOSCRIPT, and the reload cost a decision its deadline."""
        for script in (SCRIPT, SETTLE, CHARGE):
            await self._client.script_load(script)
        # And every tier's slot answers: in a cluster each may live on another master, and
        # a master still away must not pass for back (its tier's calls would time out).
        for tier in Tier:
            await self._client.exists(tier_bucket_key(tier.value))

    async def acquire(
        self,
        cost: float,
        buckets: Sequence[BucketSpec],
        load: AdmittedLoad | None = None,
        otherwise: Alternative | None = None,
    ) -> Verdict:
        for bucket in buckets:
            if cost > bucket.burst:  # can never fit: no need to ask Redis
                return Verdict(False, refused=bucket, retry_after=None, remaining=bucket.burst)
        keys, args = _taking(cost, buckets, load)
        if otherwise is not None and _fits(otherwise):
            other_keys, other_args = _taking(otherwise.cost, otherwise.buckets, otherwise.load)
            if _one_slot(keys + other_keys):
                keys += other_keys
                args += ["else", round(otherwise.beyond * 1000), *other_args]
        answer = await self._script(keys=keys, args=args)
        allowed, refused, wait_ms, remaining, recorded, over_share = answer[:6]
        elsewhere = bool(int(answer[6])) if len(answer) > 6 else None
        if allowed:
            return Verdict(
                True, remaining=float(remaining), recorded_us=int(recorded), elsewhere=elsewhere
            )
        return Verdict(
            False,
            refused=buckets[int(refused) - 1],
            retry_after=None if int(wait_ms) < 0 else int(wait_ms) / 1000,
            remaining=float(remaining),
            recorded_us=int(recorded),
            over_fair_share=bool(over_share),
            elsewhere=elsewhere,
        )

    async def settle(self, delta: float, buckets: Sequence[BucketSpec]) -> float | None:
        keys, args = _arguments(delta, buckets)
        _add_fair(keys, args, buckets)  # what the tenant was served, in its fair shares
        return float(await self._settle(keys=keys, args=args))

    async def charge(
        self, tokens: float, bucket: BucketSpec, load: AdmittedLoad | None, admissions: int
    ) -> Charged:
        keys, args = _taking(tokens, [bucket], load)
        if load is not None:
            args += ["count", admissions]
        level, recorded = await self._charge(keys=keys, args=args)
        return Charged(float(level), int(recorded))


def _arguments(tokens: float, buckets: Sequence[BucketSpec]) -> tuple[list[str], list[float | str]]:
    """The keys and arguments both scripts take first (arguments.lua)."""
    args: list[float | str] = [tokens]
    for bucket in buckets:
        args += [bucket.rate, bucket.burst, bucket.max_debt]
    return [b.key for b in buckets], args


def _taking(
    cost: float, buckets: Sequence[BucketSpec], load: AdmittedLoad | None
) -> tuple[list[str], list[float | str]]:
    """The keys and arguments of one set of buckets to take from (arguments.lua)."""
    keys, args = _arguments(cost, buckets)
    if load is not None:  # in the tier's bucket of its pool, read and written with it
        _check_recorded_in(load, buckets)
        args += ["record", load.blocks, load.pool, SLOT_MS, RECORD_EXPIRE_MS]
        args.append(1 if load.even_over_budget else 0)
    _add_fair(keys, args, buckets)
    return keys, args


def _fits(otherwise: Alternative) -> bool:
    return all(otherwise.cost <= bucket.burst for bucket in otherwise.buckets)


def _one_slot(keys: list[str]) -> bool:
    """Whether the keys live in one Redis Cluster slot (one hash tag): one script may
    touch them all."""
    tags = {_hash_tag(key) for key in keys}
    return len(tags) == 1 and None not in tags


def _hash_tag(key: str) -> str | None:
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1 : end] if start >= 0 and end > start + 1 else None


def _add_fair(keys: list[str], args: list[float | str], buckets: Sequence[BucketSpec]) -> None:
    fair: FairShare | None = buckets[0].fair if buckets else None
    if fair is not None:  # the first bucket is the tier's
        keys += [fair.state_key, fair.active_key]
        args += ["fair", fair.tenant, fair.weight, fair.window_seconds * 1000]
        args += [fair.active_seconds * 1000, fair.reserve]


def _check_recorded_in(load: AdmittedLoad, buckets: Sequence[BucketSpec]) -> None:
    """An admission is recorded in the first bucket, which must be its tier's in its pool
    (one HMGET and one HSET for both)."""
    if not buckets or buckets[0].key != tier_bucket_key(load.tier, load.pool):
        raise ValueError(f"the load of {load.tier} in {load.pool} is recorded in its tier's bucket")
