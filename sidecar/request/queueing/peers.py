"""What the other sidecars hold in flight, so the concurrency limits are the cluster's:
in all, and per model pool; per pool and tier, for what the engines have queued ahead of
a newcomer (first_token.py); and, for the screen, in flight and waiting per tier."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

import redis.asyncio as redis

PEERS_KEY = "qos:{qos-pods}:sidecars"
# Besides the pools' counts, each tier's, under names no pool can have (the script sums
# every NAME=COUNT alike; a sidecar of an older version sums them and never reads them).
IN_FLIGHT_PREFIX, WAITING_PREFIX = "@in_flight:", "@waiting:"
HELD_PREFIX = "@held:"  # @held:POOL:TIER
POOLS_KEY = "qos:{qos-pods}:sidecar-pools"
_SCRIPT = resources.files("sidecar.request.queueing").joinpath("peers.lua").read_text()


class PeerRegistry:
    def __init__(self, client: redis.Redis, my_id: str) -> None:
        self._script = client.register_script(_SCRIPT)
        self._id = my_id
        self.others_in_flight = 0
        self.others_in_pool: dict[str, int] = {}
        self.others_in_tier: dict[str, int] = {}  # slots held, by tier
        self.others_waiting: dict[str, int] = {}  # requests waiting, by tier
        self.others_held: dict[tuple[str, str], int] = {}  # slots held, by pool and tier
        self.peers = 0

    async def heartbeat(
        self,
        in_pool: Mapping[str, int],
        ttl_seconds: float = 1.0,
        in_tier: Mapping[str, int] | None = None,
        waiting: Mapping[str, int] | None = None,
        held: Mapping[tuple[str, str], int] | None = None,  # by pool and tier
    ) -> None:
        named = {
            **in_pool,
            **{IN_FLIGHT_PREFIX + tier: n for tier, n in (in_tier or {}).items()},
            **{WAITING_PREFIX + tier: n for tier, n in (waiting or {}).items()},
            **{f"{HELD_PREFIX}{pool}:{tier}": n for (pool, tier), n in (held or {}).items()},
        }
        counts = [f"{name}={count}" for name, count in named.items() if count > 0]
        total, peers, flat = await self._script(
            keys=[PEERS_KEY, POOLS_KEY],
            args=[self._id, sum(in_pool.values()), round(ttl_seconds * 1000), *counts],
        )
        self.others_in_flight, self.peers = int(total), int(peers)
        summed = {
            (name.decode() if isinstance(name, bytes) else name): int(count)
            for name, count in zip(flat[::2], flat[1::2], strict=True)
        }
        self.others_in_pool = {k: n for k, n in summed.items() if not k.startswith("@")}
        self.others_in_tier = _prefixed(summed, IN_FLIGHT_PREFIX)
        self.others_waiting = _prefixed(summed, WAITING_PREFIX)
        self.others_held = {
            (pool, tier): n
            for name, n in _prefixed(summed, HELD_PREFIX).items()
            for pool, tier in [name.rsplit(":", 1)]
        }


def _prefixed(summed: Mapping[str, int], prefix: str) -> dict[str, int]:
    return {k.removeprefix(prefix): n for k, n in summed.items() if k.startswith(prefix)}
