"""The running streams this sidecar may end early, and which of them to end.

A stream of an evictable tier registers once Envoy hands its response to the sidecar
(full-duplex body processing), with what it holds of its pool's KV cache: its prompt's
blocks and one more each block size of tokens it has streamed. `choose` picks, for a
pool, the streams whose blocks add up to what must be freed: the lowest tier first, and
within a tier the newest first (it has the least to lose, and under priority scheduling
the engine would preempt it first anyway); only those whose body has begun to flow.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from sidecar.config.base import TIERS, Tier

_RANK = {tier: rank for rank, tier in enumerate(TIERS)}  # P0 first


@dataclass(eq=False)
class RunningStream:
    slot: str
    tier: Tier
    pool: str
    started: float  # when its response began, monotonic seconds
    prompt_blocks: float  # its prompt's KV blocks
    block_size: int
    # Ends it, well-formed, and has Envoy reset its upstream.
    end: Callable[[], Coroutine[Any, Any, None]]
    tokens: int = 0  # streamed so far
    # Its body has begun to pass through the sidecar: before that, Envoy takes no end of it
    # from the sidecar (a body message it has not asked for yet is spurious to it).
    flowing: bool = False
    ended: bool = field(default=False)

    @property
    def blocks(self) -> float:
        return self.prompt_blocks + self.tokens / self.block_size


class EvictableStreams:
    def __init__(self) -> None:
        self._by_slot: dict[str, RunningStream] = {}

    def __len__(self) -> int:
        return len(self._by_slot)

    def add(self, stream: RunningStream) -> None:
        self._by_slot[stream.slot] = stream

    def remove(self, slot: str) -> None:
        self._by_slot.pop(slot, None)

    def blocks_in(self, pool: str) -> float:
        """What this sidecar's evictable streams hold of `pool`'s KV cache."""
        return sum(s.blocks for s in self._by_slot.values() if s.pool == pool and not s.ended)

    def choose(self, pool: str, blocks: float) -> list[RunningStream]:
        """The streams of `pool` to end so that about `blocks` KV blocks come free: the
        lowest tier's newest first, never more than needed."""
        if blocks <= 0:
            return []
        candidates = sorted(
            (s for s in self._by_slot.values() if s.pool == pool and s.flowing and not s.ended),
            key=lambda s: (-_RANK[s.tier], -s.started),
        )
        chosen, freed = [], 0.0
        for stream in candidates:
            if freed >= blocks:
                break
            chosen.append(stream)
            freed += stream.blocks
        return chosen
