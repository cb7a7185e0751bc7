"""What a pool's engines serve while they hold a queue: its capacity as it is now, which
may be less than the figure configured, or measured before, or said by its pods.

Exchange ends say how many prompt tokens each answer came to (`served`). Each time the
load monitor reads the reports it says, per pool, whether every pod holds requests
waiting (`observe`): while they do, the engines serve all they can, and the prompt
tokens this sidecar's answers came to a second, over its share of the pool's requests in
flight, are the pool's. The samples (one each SAMPLE_SECONDS or more) move a figure that
starts from the one in force (half-life HALF_LIFE_SECONDS), so one odd second moves it
little. It is told once MIN_ENDS answers ended in such time, and for HOLD_SECONDS after
the last read that found the pool's queues full: when it cuts the budgets the queues
drain, and going back to the higher figure at once would fill them again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

SAMPLE_SECONDS = 1.0
HALF_LIFE_SECONDS = 5.0
MIN_ENDS = 8
HOLD_SECONDS = 30.0


@dataclass
class _Pool:
    tokens: float = 0.0  # prompt tokens of the answers ended since the last sample
    ends: int = 0  # and how many
    sampled_at: float | None = None  # the last sample's time, within a full spell
    rate: float | None = None
    counted_ends: int = 0  # answers ended in full time, over the samples taken
    full_at: float = float("-inf")  # the last read that found the queues full


class ServedCapacity:
    def __init__(
        self,
        share: Callable[[str], float],  # this sidecar's share of a pool's requests in flight
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._share = share
        self._clock = clock
        self._pools: dict[str, _Pool] = {}

    def served(self, pool: str, prompt_tokens: int) -> None:
        """An answer in `pool` ended, its prompt `prompt_tokens` long."""
        seen = self._pools.setdefault(pool, _Pool())
        seen.tokens += prompt_tokens
        seen.ends += 1

    def observe(self, pool: str, full: bool, in_force: float) -> float | None:
        """The pool's service rate (prompt tokens a second) as measured, or None while not
        known or no longer current. `full`: every pod of the pool holds requests waiting;
        `in_force`: the figure the measure starts from."""
        now = self._clock()
        share = self._share(pool) if full else 0.0
        seen = self._pools.setdefault(pool, _Pool())
        if now - seen.full_at > HOLD_SECONDS:  # long past: the next spell starts afresh
            seen.rate, seen.counted_ends = None, 0
        if not full or share <= 0:
            seen.tokens, seen.ends, seen.sampled_at = 0.0, 0, None
        elif seen.sampled_at is None:  # a spell begins: what ended before it is not counted
            seen.tokens, seen.ends, seen.sampled_at = 0.0, 0, now
            seen.full_at = now
        else:
            seen.full_at = now
            elapsed = now - seen.sampled_at
            if elapsed >= SAMPLE_SECONDS:
                sample = seen.tokens / share / elapsed
                start = in_force if seen.rate is None else seen.rate
                seen.rate = start + (1 - 0.5 ** (elapsed / HALF_LIFE_SECONDS)) * (sample - start)
                seen.counted_ends += seen.ends
                seen.tokens, seen.ends, seen.sampled_at = 0.0, 0, now
        return seen.rate if seen.counted_ends >= MIN_ENDS else None
