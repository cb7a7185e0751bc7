"""Token buckets in Redis, taken by one atomic Lua script per decision."""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

import redis.asyncio as redis

from sidecar.limiter.buckets import BucketSpec, Verdict

SCRIPT = resources.files("sidecar.limiter").joinpath("token_bucket.lua").read_text()
SETTLE = resources.files("sidecar.limiter").joinpath("settle.lua").read_text()


class RedisTokenBuckets:
    """EVALSHA, reloading the script on NOSCRIPT (restart, failover, SCRIPT FLUSH)."""

    def __init__(self, client: redis.Redis) -> None:
        # redis-py's Script sends EVALSHA and, on NOSCRIPT, loads the script and retries.
        self._client = client
        self._script = client.register_script(SCRIPT)
        self._settle = client.register_script(SETTLE)

    async def warm(self) -> None:
        """Load the scripts (on every master of a cluster): a master that came back empty
        would otherwise answer NOSCRIPT, and the reload cost a decision its deadline."""
        for script in (SCRIPT, SETTLE):
            await self._client.script_load(script)

    async def acquire(self, cost: float, buckets: Sequence[BucketSpec]) -> Verdict:
        for index, bucket in enumerate(buckets):
            if cost > bucket.burst:  # can never fit: no need to ask Redis
                return Verdict(False, refused=index, retry_after=None, remaining=bucket.burst)
        args: list[float] = [cost]
        for bucket in buckets:
            args += [bucket.rate, bucket.burst]
        allowed, refused, wait_ms, remaining = await self._script(
            keys=[b.key for b in buckets], args=args
        )
        if allowed:
            return Verdict(True, remaining=float(remaining))
        return Verdict(
            False,
            refused=int(refused) - 1,
            retry_after=None if int(wait_ms) < 0 else int(wait_ms) / 1000,
            remaining=float(remaining),
        )

    async def settle(self, delta: float, buckets: Sequence[BucketSpec]) -> None:
        args: list[float] = [delta]
        for bucket in buckets:
            args += [bucket.rate, bucket.burst]
        await self._settle(keys=[b.key for b in buckets], args=args)
