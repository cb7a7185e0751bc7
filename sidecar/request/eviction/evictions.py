"""The streams this sidecar follows so that it may end them early, and ending them.

An exchange follows its response (`follow`) when its stream's tier is evictable in its
pool while eviction is on (overload.evict_below_free_kv), and says when it ended of
itself (`ended`). The load monitor asks for blocks to be freed in a pool (`evict`): this
sidecar's part of them (its share of the pool's requests in flight, as every sidecar does
its own), less what streams ended lately for it are still freeing, is freed by ending the
lowest tier's newest streams; each is ended well-formed by its exchange.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from sidecar.config.base import Tier
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.shedding import SheddingState
from sidecar.metrics import SidecarMetrics
from sidecar.request.eviction.streams import EvictableStreams, RunningStream
from sidecar.request.policy.decision import Admission

log = logging.getLogger(__name__)

# An ended stream's blocks count as being freed this long: the engine aborts it within a
# second, and its pods' next reports show it.
FREEING_SECONDS = 2.0

End = Callable[[], Coroutine[Any, Any, None]]


class Evictions:
    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        shedding: Callable[[], SheddingState],
        share: Callable[[str], float],  # this sidecar's share of a pool's requests in flight
        metrics: SidecarMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._snapshot = snapshot
        self._shedding = shedding
        self._share = share
        self._metrics = metrics
        self._clock = clock
        self.streams = EvictableStreams()
        self._freeing: deque[tuple[float, str, float]] = deque()  # (until, pool, blocks)
        self._ending: set[asyncio.Task[None]] = set()

    def follow(self, admitted: Admission, end: End) -> RunningStream | None:
        """A stream to follow, registered; None when its tier may not be ended early."""
        snapshot = self._snapshot()
        if snapshot.config.overload.evict_below_free_kv is None or not admitted.slot:
            return None
        pool = snapshot.pools.get(admitted.pool)
        if pool is None or not admitted.tier or not pool.tiers[Tier(admitted.tier)].evictable:
            return None
        block_size = self._shedding().for_pool(pool.name).load.kv_block_size
        stream = RunningStream(
            admitted.slot,
            Tier(admitted.tier),
            pool.name,
            self._clock(),
            admitted.prompt_tokens / block_size,
            block_size,
            end,
        )
        self.streams.add(stream)
        return stream

    def ended(self, slot: str) -> None:
        self.streams.remove(slot)

    def evict(self, pool: str, blocks: float) -> int:
        """End this sidecar's part of the streams holding `blocks` of `pool`'s KV blocks;
        how many it ends."""
        now = self._clock()
        while self._freeing and self._freeing[0][0] <= now:
            self._freeing.popleft()
        freeing = sum(b for _, name, b in self._freeing if name == pool)
        chosen = self.streams.choose(pool, blocks * self._share(pool) - freeing)
        for stream in chosen:
            stream.ended = True
            self.streams.remove(stream.slot)
            self._freeing.append((now + FREEING_SECONDS, pool, stream.blocks))
            self._metrics.child(self._metrics.evictions, pool, stream.tier.value).inc()
            task = asyncio.create_task(stream.end())
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)
        if chosen:
            log.info(
                "streams ended early for the tiers above",
                extra={"pool": pool, "streams": len(chosen), "blocks": round(blocks, 1)},
            )
        return len(chosen)
