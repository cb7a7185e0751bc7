"""How long a newcomer would wait for a slot, foreseen from the queue ahead of it and its
pool's recent rate of releases; and how long streams take from admission to their first
token lately, which a stream's TTFT target must leave room for. Pure: no I/O, the clock
given.

wait = releases it needs / releases per second.
- Releases it needs: the waiters of the tiers above it and of its own, and itself (strict
  priority). P1 is served at least its `p1_min_share` of the releases while it waits, so
  it needs no more than (its tier's waiters + 1) / share.
- Releases per second: slots given back in the pool over the last `window` seconds. With
  fewer than `min_releases` seen there is no estimate: the newcomer waits as before.
Arrivals of higher tiers after it and promotions of starving waiters are not foreseen:
they make a wait longer than foreseen (qos_queue_wait_error_seconds measures by how much).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from sidecar.config.base import Tier
from sidecar.request.queueing.scheduler import PRIORITY, Scheduler

WINDOW_SECONDS = 10.0
MIN_RELEASES = 4
FIRST_TOKEN_WINDOW_SECONDS = 30.0
FIRST_TOKENS_KEPT = 64
MIN_FIRST_TOKENS = 8
MOST = 0.99
_Timed = TypeVar("_Timed", bound=tuple[float, ...])
GROWTHS_KEPT = 32
GROWTH_QUANTILE = 0.9
PROBE_AFTER_SECONDS = 2.0


class EventRate:
    """Events a second in one pool (slots given back, or taken), over a sliding window."""

    def __init__(
        self,
        clock: Callable[[], float],
        window: float = WINDOW_SECONDS,
        min_releases: int = MIN_RELEASES,
    ) -> None:
        self._clock = clock
        self._window = window
        self._min_releases = min_releases
        self._times: deque[float] = deque()
        self._first_seen = clock()

    def note(self) -> None:
        self._times.append(self._clock())

    def per_second(self) -> float | None:
        """None while too few releases were seen to tell."""
        now = self._clock()
        while self._times and self._times[0] < now - self._window:
            self._times.popleft()
        if len(self._times) < self._min_releases:
            return None
        # A pool watched for less than the window has its rate over the time watched.
        watched = min(self._window, now - self._first_seen)
        return len(self._times) / watched if watched > 0 else None


class HoldTimes:
    """How long slots of one tier in one pool were held, over a sliding window."""

    def __init__(self, clock: Callable[[], float], window: float = WINDOW_SECONDS) -> None:
        self._clock = clock
        self._window = window
        self._ended: deque[tuple[float, float]] = deque()  # (when given back, seconds held)
        # Kept as they come and go: read each tenth of a second, over thousands at high rates.
        self._seconds = 0.0

    def note(self, seconds: float) -> None:
        self._ended.append((self._clock(), seconds))
        self._seconds += seconds

    def sum_and_count(self) -> tuple[float, int]:
        """The seconds held in all, and by how many slots, of those given back lately."""
        now = self._clock()
        while self._ended and self._ended[0][0] < now - self._window:
            self._seconds -= self._ended.popleft()[1]
        if not self._ended:
            self._seconds = 0.0  # no rounding left behind
        return self._seconds, len(self._ended)


class FirstTokenTimes:
    """Seconds the streams timed lately took from admission to their first token beyond
    the engine queue foreseen for them (first_token.py), per tier and pool: beyond the
    queue foreseen at their pricing (which includes how it grew while they waited) and
    beyond the queue foreseen at their admission. `most_took`: the 99th percentile of
    either. Fewer than `min_samples` in the window: not known. And how much later their
    first tokens were foreseen at admission than at pricing, of those that waited
    (`growth`).

    Times that shed every stream of a tier as late learn nothing new: the engine may have
    sped up long since. So after `probe_after` seconds without a stream timed, one is let
    through as a probe (`probe`), one each `probe_after` seconds; and the first stream
    timed after a probe went out supersedes the slower ones timed before it. (A silence
    alone does not: a quiet spell at a low rate of samples says nothing of the engine.)"""

    def __init__(
        self,
        clock: Callable[[], float],
        window: float = FIRST_TOKEN_WINDOW_SECONDS,
        kept: int = FIRST_TOKENS_KEPT,
        min_samples: int = MIN_FIRST_TOKENS,
        probe_after: float = PROBE_AFTER_SECONDS,
    ) -> None:
        self._clock = clock
        self._window = window
        self._kept = kept
        self._min_samples = min_samples
        self._probe_after = probe_after
        self._seen: dict[tuple[Tier, str], deque[tuple[float, float, float]]] = {}
        self._growth: dict[tuple[Tier, str], deque[tuple[float, float]]] = {}
        self._probed: dict[tuple[Tier, str], float] = {}  # when a probe was last let through

    def note(
        self, tier: Tier, pool: str, seconds: float, at_admission: float | None = None
    ) -> None:
        """`seconds` beyond the queue foreseen at pricing; `at_admission` beyond the one
        foreseen at admission (None: the same, nothing was foreseen again)."""
        seen = self._seen.setdefault((tier, pool), deque(maxlen=self._kept))
        admitted = seconds if at_admission is None else at_admission
        now = self._clock()
        if seen and self._probed.get((tier, pool), -math.inf) > seen[-1][0]:
            # The first timed since a probe went out: the engine as it is now.
            faster = [entry for entry in seen if entry[1] <= seconds and entry[2] <= admitted]
            seen.clear()
            seen.extend(faster)
        seen.append((now, seconds, admitted))

    def probe(self, tier: Tier, pool: str) -> bool:
        """Whether to let a stream foreseen late through, to be timed: True once each
        `probe_after` seconds while no stream of `tier` in `pool` was timed."""
        now = self._clock()
        seen = self._seen.get((tier, pool))
        last = max(seen[-1][0] if seen else -math.inf, self._probed.get((tier, pool), -math.inf))
        if now - last <= self._probe_after:
            return False
        self._probed[(tier, pool)] = now
        return True

    def most_took(self, tier: Tier, pool: str, at_admission: bool = False) -> float | None:
        seen = self._seen.get((tier, pool))
        if seen is None:
            return None
        if len(_drop_older(seen, self._clock() - self._window)) < self._min_samples:
            return None
        took = sorted(entry[2 if at_admission else 1] for entry in seen)
        return took[min(len(took) - 1, int(MOST * len(took)))]

    def note_growth(self, tier: Tier, pool: str, seconds: float) -> None:
        """A stream foreseen again at its admission after a wait: `seconds` later (or
        earlier, below 0) than at its pricing."""
        grown = self._growth.setdefault((tier, pool), deque(maxlen=GROWTHS_KEPT))
        grown.append((self._clock(), seconds))

    def growth(self, tier: Tier, pool: str) -> float:
        """How much later than at pricing first tokens were foreseen after a wait lately:
        the `GROWTH_QUANTILE` of the last `GROWTHS_KEPT` within the window, 0 if less."""
        grown = self._growth.get((tier, pool))
        if grown is None:
            return 0.0
        if len(_drop_older(grown, self._clock() - self._window)) < self._min_samples:
            return 0.0
        later = sorted(seconds for _, seconds in grown)
        return max(0.0, later[int(GROWTH_QUANTILE * (len(later) - 1))])


def _drop_older(entries: deque[_Timed], oldest: float) -> deque[_Timed]:
    """`entries`, oldest first (each its time first), without those before `oldest`."""
    while entries and entries[0][0] < oldest:
        entries.popleft()
    return entries


def releases_needed(scheduler: Scheduler, tier: Tier) -> float:
    """Releases until a newcomer of `tier` is served, as the queue stands."""
    own = scheduler.waiting(tier) + 1
    above = sum(scheduler.waiting(t) for t in PRIORITY[: PRIORITY.index(tier)])
    needed = float(above + own)
    share = scheduler.config.p1_min_share
    if tier is Tier.P1 and share > 0:
        needed = min(needed, own / share)
    return needed


def foreseen_wait(scheduler: Scheduler, tier: Tier, rate: EventRate) -> float | None:
    """Seconds a newcomer of `tier` would wait; None when the rate is not known yet."""
    per_second = rate.per_second()
    if per_second is None:
        return None
    return releases_needed(scheduler, tier) / per_second
