"""Token buckets in Redis, taken by one atomic Lua script per decision."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

import redis.asyncio as redis

from sidecar.config.schema import Tier
from sidecar.limiter.buckets import BucketSpec, Verdict, tier_bucket_key
from sidecar.overload.admitted import RECORD_EXPIRE_MS, SLOT_MS, AdmittedLoad, admitted_key
from sidecar.redis_multiplexed import MultiplexedRedis

_LUA = resources.files("sidecar.limiter")
# Both scripts start with the bucket arithmetic they share.
_LEVEL = _LUA.joinpath("bucket_level.lua").read_text()
SCRIPT = _LEVEL + _LUA.joinpath("token_bucket.lua").read_text()
SETTLE = _LEVEL + _LUA.joinpath("settle.lua").read_text()


class RedisTokenBuckets:
    """EVALSHA, reloading the script on NOSCRIPT (restart, failover, SCRIPT FLUSH)."""

    def __init__(self, client: redis.Redis, calls: MultiplexedRedis | None = None) -> None:
        # Both kinds of script send EVALSHA and, on NOSCRIPT, load the script and retry;
        # `calls`, when given, carries the per-decision ones (a connection they share).
        self._client = client
        scripts = calls.script if calls is not None else client.register_script
        self._script = scripts(SCRIPT)
        self._settle = scripts(SETTLE)

    async def warm(self) -> None:
        """Load the scripts (on every master of a cluster): a master that came back empty
        would otherwise answer NOSCRIPT, and the reload cost a decision its deadline."""
        for script in (SCRIPT, SETTLE):
            await self._client.script_load(script)
        # And every tier's slot answers: in a cluster each may live on another master, and
        # a master still away must not pass for back (its tier's calls would time out).
        for tier in Tier:
            await self._client.exists(tier_bucket_key(tier.value))

    async def acquire(
        self, cost: float, buckets: Sequence[BucketSpec], load: AdmittedLoad | None = None
    ) -> Verdict:
        for index, bucket in enumerate(buckets):
            if cost > bucket.burst:  # can never fit: no need to ask Redis
                return Verdict(False, refused=index, retry_after=None, remaining=bucket.burst)
        keys = [b.key for b in buckets]
        args: list[float | str] = [cost]
        for bucket in buckets:
            args += [bucket.rate, bucket.burst]
        if load is not None:  # in the tier's bucket of its pool, read and written with it
            keys.append(record_key(load, buckets))
            args += ["record", load.blocks, load.pool, SLOT_MS, RECORD_EXPIRE_MS]
            args.append(1 if load.even_over_budget else 0)
        fair = buckets[0].fair if buckets else None
        if fair is not None:  # the first bucket is the tier's
            keys += [fair.state_key, fair.active_key]
            args += ["fair", fair.tenant, fair.weight, fair.window_seconds * 1000]
            args += [fair.active_seconds * 1000, fair.reserve]
        allowed, refused, wait_ms, remaining, recorded, over_share = await self._script(
            keys=keys, args=args
        )
        if allowed:
            return Verdict(True, remaining=float(remaining), recorded_ms=int(recorded))
        return Verdict(
            False,
            refused=int(refused) - 1,
            retry_after=None if int(wait_ms) < 0 else int(wait_ms) / 1000,
            remaining=float(remaining),
            recorded_ms=int(recorded),
            over_fair_share=bool(over_share),
        )

    async def settle(self, delta: float, buckets: Sequence[BucketSpec]) -> float | None:
        keys = [b.key for b in buckets]
        args: list[float | str] = [delta]
        for bucket in buckets:
            args += [bucket.rate, bucket.burst, bucket.max_debt]
        fair = buckets[0].fair if buckets else None
        if fair is not None:  # what the tenant was served, in its tier's fair shares
            keys.append(fair.state_key)
            args += ["fair", fair.tenant, fair.window_seconds * 1000]
        return float(await self._settle(keys=keys, args=args))


def record_key(load: AdmittedLoad, buckets: Sequence[BucketSpec]) -> str:
    """Where the admission is recorded: in the first bucket when that is its tier's in its
    pool (one HMGET and one HSET for both), else in the tier's record of its own."""
    bucket = tier_bucket_key(load.tier, load.pool)
    return bucket if buckets and buckets[0].key == bucket else admitted_key(load.tier)
