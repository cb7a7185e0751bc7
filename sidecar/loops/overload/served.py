"""What a pool's engines serve while they fall behind: its capacity as it is now, which may
be less than the figure configured, or measured before, or said by its pods.

Exchange ends say what each answer cost its budgets (`served`: its tokens as the buckets
charge them, settled from the engine's usage), so the measure is in the budgets' own
units whatever the mix of prompts and answers. Each time the load monitor reads the
reports it says, per pool, whether every pod holds requests waiting (`observe`). While
they do, and the requests the sidecars hold in the pool grew since the last sample, the
engines serve less than they are sent: what this sidecar's answers cost a second, over
its share of the pool's requests in flight, is what the pool serves, counted once the
queues stayed full SETTLE_SECONDS (a pool well below its capacity fills them in bursts
too). A queue that holds but does not grow says only that the engines keep up: such a
sample is the figure in force. A figure told that moves (a pod joins, or says it
prefills more) starts the measure afresh. The samples (one each SAMPLE_SECONDS or more)
move a measure that starts from the figure (half-life HALF_LIFE_SECONDS), so one odd
second moves it little and an engine that catches up brings it back. It is told once
MIN_ENDS answers ended in sampled time, and for HOLD_SECONDS after the last read that
found the pool's queues full: when it cuts the budgets the queues drain, and going back
to the higher figure at once would fill them again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

SAMPLE_SECONDS = 1.0
# A spell counts once the queues stayed full this long: a pool well below its capacity
# fills its queues in bursts too, and what it serves then is what it is sent.
SETTLE_SECONDS = 3.0
# The figure told moving by more than this (a pod joined, or said it prefills more)
# starts the measure afresh: it corrected the figure it was taken against.
FIGURE_MOVED = 0.01
HALF_LIFE_SECONDS = 5.0
MIN_ENDS = 8
HOLD_SECONDS = 30.0


@dataclass
class _Pool:
    cost: float = 0.0  # what the answers ended since the last sample cost
    ends: int = 0  # and how many
    sampled_at: float | None = None  # the last sample's time, within a full spell
    spell_at: float = 0.0  # when the queues were found full, this spell
    figure: float = 0.0  # the figure told that the measure corrects
    rate: float | None = None
    counted_ends: int = 0  # answers ended in full time, over the samples taken
    full_at: float = float("-inf")  # the last read that found the queues full
    held: int = 0  # the requests the sidecars held in the pool at the last sample


class ServedCapacity:
    def __init__(
        self,
        share: Callable[[str], float],  # this sidecar's share of a pool's requests in flight
        held: Callable[[str], int],  # the requests every sidecar holds in a pool
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._share = share
        self._held = held
        self._clock = clock
        self._pools: dict[str, _Pool] = {}

    def served(self, pool: str, cost: float) -> None:
        """An answer in `pool` ended, costing its budgets `cost`."""
        seen = self._pools.setdefault(pool, _Pool())
        seen.cost += cost
        seen.ends += 1

    def observe(self, pool: str, full: bool, in_force: float) -> float | None:
        """The pool's service rate (its budgets' tokens a second) as measured, or None
        while not known or no longer current. `full`: every pod of the pool holds
        requests waiting; `in_force`: the figure told, which the measure starts from."""
        now = self._clock()
        share = self._share(pool) if full else 0.0
        seen = self._pools.setdefault(pool, _Pool())
        moved = abs(in_force - seen.figure) > FIGURE_MOVED * max(seen.figure, in_force)
        if moved or now - seen.full_at > HOLD_SECONDS:  # the next spell starts afresh
            seen.rate, seen.counted_ends, seen.figure = None, 0, in_force
        if not full or share <= 0:
            seen.cost, seen.ends, seen.sampled_at = 0.0, 0, None
        elif seen.sampled_at is None:  # a spell begins: what ended before it is not counted
            seen.cost, seen.ends, seen.sampled_at = 0.0, 0, now
            seen.full_at, seen.held, seen.spell_at = now, self._held(pool), now
        else:
            seen.full_at = now
            elapsed = now - seen.sampled_at
            if elapsed >= SAMPLE_SECONDS and now - seen.spell_at < SETTLE_SECONDS:
                seen.cost, seen.ends, seen.sampled_at = 0.0, 0, now
                seen.held = self._held(pool)
            elif elapsed >= SAMPLE_SECONDS:
                held = self._held(pool)
                behind = held > seen.held  # sent more than they served
                sample = seen.cost / share / elapsed if behind else in_force
                start = in_force if seen.rate is None else seen.rate
                seen.rate = start + (1 - 0.5 ** (elapsed / HALF_LIFE_SECONDS)) * (sample - start)
                seen.counted_ends += seen.ends
                seen.cost, seen.ends, seen.sampled_at, seen.held = 0.0, 0, now, held
        return seen.rate if seen.counted_ends >= MIN_ENDS else None
