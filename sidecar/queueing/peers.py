"""What the other sidecars hold in flight, so the concurrency limit is the cluster's."""

from __future__ import annotations

from importlib import resources

import redis.asyncio as redis

PEERS_KEY = "qos:{qos-pods}:sidecars"
_SCRIPT = resources.files("sidecar.queueing").joinpath("peers.lua").read_text()


class PeerRegistry:
    def __init__(self, client: redis.Redis, my_id: str) -> None:
        self._script = client.register_script(_SCRIPT)
        self._id = my_id
        self.others_in_flight = 0
        self.peers = 0

    async def heartbeat(self, in_flight: int, ttl_seconds: float = 1.0) -> None:
        total, peers = await self._script(
            keys=[PEERS_KEY], args=[self._id, in_flight, round(ttl_seconds * 1000)]
        )
        self.others_in_flight, self.peers = int(total), int(peers)
