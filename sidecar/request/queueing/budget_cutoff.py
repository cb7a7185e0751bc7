"""Which requests a tier's budget serves when they ask for more than it refills: the
cheapest. While a line waits for the tier's bucket, a newcomer that costs more than the
cutoff is answered at once: the cutoff is the largest cost such that the requests asking
over the last `window` seconds that cost no more would have needed no more than the
bucket's rate. The same budget then serves more requests, and the line stays short
enough that the waits foreseen in it hold. Pure: no I/O, the clock given."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

WINDOW_SECONDS = 10.0


class Demand:
    """The costs that asked a bucket lately."""

    def __init__(self, clock: Callable[[], float], window: float = WINDOW_SECONDS) -> None:
        self._clock = clock
        self._window = window
        self._asked: dict[str, deque[tuple[float, float]]] = {}

    def note(self, key: str, cost: float) -> None:
        now = self._clock()
        asked = self._asked.setdefault(key, deque())
        asked.append((now, cost))
        while asked[0][0] < now - self._window:
            asked.popleft()

    def cutoff(self, key: str, rate: float) -> float:
        """The dearest cost the bucket's rate serves of what asked lately (inf: all)."""
        asked = self._asked.get(key)
        if not asked:
            return math.inf
        now = self._clock()
        # Over the whole window even when it was watched for less: lenient at first.
        refills = rate * self._window
        total, dearest = 0.0, 0.0
        for cost in sorted(cost for at, cost in asked if at >= now - self._window):
            total += cost
            if total > refills:
                return dearest
            dearest = cost
        return math.inf
