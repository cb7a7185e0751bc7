"""What the other sidecars hold in flight, so the concurrency limits are the cluster's:
in all, and per model pool."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

import redis.asyncio as redis

PEERS_KEY = "qos:{qos-pods}:sidecars"
POOLS_KEY = "qos:{qos-pods}:sidecar-pools"
_SCRIPT = resources.files("sidecar.request.queueing").joinpath("peers.lua").read_text()


class PeerRegistry:
    def __init__(self, client: redis.Redis, my_id: str) -> None:
        self._script = client.register_script(_SCRIPT)
        self._id = my_id
        self.others_in_flight = 0
        self.others_in_pool: dict[str, int] = {}
        self.peers = 0

    async def heartbeat(self, in_pool: Mapping[str, int], ttl_seconds: float = 1.0) -> None:
        counts = [f"{pool}={count}" for pool, count in in_pool.items() if count > 0]
        total, peers, flat = await self._script(
            keys=[PEERS_KEY, POOLS_KEY],
            args=[self._id, sum(in_pool.values()), round(ttl_seconds * 1000), *counts],
        )
        self.others_in_flight, self.peers = int(total), int(peers)
        self.others_in_pool = {
            (pool.decode() if isinstance(pool, bytes) else pool): int(count)
            for pool, count in zip(flat[::2], flat[1::2], strict=True)
        }
