"""A Redis lease: one SLO controller in the cluster at a time.

The holder renews it every tick; if it dies, the lease expires and the next sidecar to
ask takes it. A sidecar that cannot reach Redis does not act as controller.
"""

from __future__ import annotations

from importlib import resources

import redis.asyncio as redis

LEASE_KEY = "qos:{qos-slo}:controller"
_SCRIPT = resources.files("sidecar.loops.slo").joinpath("lease.lua").read_text()


class Lease:
    def __init__(self, client: redis.Redis, me: str, key: str = LEASE_KEY) -> None:
        self._script = client.register_script(_SCRIPT)
        self.me = me
        self._key = key
        self.holder: str | None = None

    async def hold(self, seconds: float) -> bool:
        """Take or renew the lease; True while this sidecar holds it."""
        try:
            holder = await self._script(keys=[self._key], args=[self.me, round(seconds * 1000)])
        except redis.RedisError:
            self.holder = None
            return False
        self.holder = holder.decode() if isinstance(holder, bytes) else holder
        return self.holder == self.me
