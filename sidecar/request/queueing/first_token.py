"""How long a stream will take from its admission to its first token, foreseen: what the
engines have queued ahead of it, at the rate its pool gives slots back, and the rest (the
way to the engine and its prefill) as its tier's streams took it lately.

    first token = engine queue + rest
    engine queue = max(0, ahead + 1 - seats) / releases per second

- ahead: the slots held in its pool by every sidecar, of its tier and those above it when
  every pod schedules by the priority sent (a newcomer waits behind those only), else of
  every tier. Each held slot is a request the engines run or hold in their queue.
- seats: the requests the pool's pods run at once, as they report (the most each was seen
  running). None seen yet: no engine queue is foreseen.
- releases per second: the pool's slots given back lately (forecast.EventRate); until
  enough were, what the pool's capacity (tokens a second, as its pods say or as
  configured) serves of requests costing what this one does: at a sale's first seconds
  the engines fill before any of their requests has ended.
- rest: what the timed streams of its tier took beyond the engine queue foreseen for each
  (forecast.FirstTokenTimes, their 99th percentile); not known before a few are timed.

Foreseen twice. At pricing, the rest is beyond the queue foreseen then: it holds how the
engines' queue grew while streams waited for their turn (for their budget, or a slot),
and caps the wait a stream is given. At admission after a wait, again, with the rest
beyond the queue foreseen at admission: a stream that waited its whole allowance into a
queue longer than foreseen would now be late.

The second forecast comes out later than the first when the engines' queue grew during
the wait: the streams that waited their whole allowance are then answered after their
wait. So a stream's wait is capped shorter by how much later the second forecasts came
lately (`growth`, their 90th percentile): one whose turn is foreseen past that is
answered at once instead.

A stream whose first token is foreseen past its TTFT target is late whatever follows:
waiting.py answers it at once, or when its turn comes
(qos_first_token_forecast_error_seconds measures the forecast at pricing against what
came). Unless the engines' queue alone would not make it late and none of its tier was
timed for a while: then one is let through as a probe (`probe`), so slow times
learnt while the engine was slow do not outlive the slowdown.
"""

from __future__ import annotations

from collections.abc import Callable

from sidecar.config.base import Tier
from sidecar.config.pools import Pool
from sidecar.loops.overload.shedding import SheddingState
from sidecar.request.policy.decision import FirstTokenForecast
from sidecar.request.queueing.queue import AdmissionQueue
from sidecar.request.queueing.scheduler import PRIORITY


def engine_queue_seconds(ahead: int, seats: int, per_second: float | None) -> float:
    """Seconds a newcomer waits for a seat behind `ahead` requests the engines hold."""
    if seats <= 0 or not per_second:
        return 0.0
    return max(0, ahead + 1 - seats) / per_second


class FirstTokenForecaster:
    def __init__(self, queue: AdmissionQueue, shedding: Callable[[], SheddingState]) -> None:
        self._queue = queue
        self._shedding = shedding  # the pools' load, as their pods report it

    def foresee(
        self,
        tier: Tier,
        pool: Pool,
        cost: float,
        at_admission: bool = False,
        state: SheddingState | None = None,
    ) -> FirstTokenForecast:
        """`cost`: the request's, in its pool's tokens (its prompt and output, weighted).
        `at_admission`: foreseen again as it is admitted after a wait, its slot held.
        `state`: the pool's load as its decision read it (None: as it stands now)."""
        if state is None:
            state = self._shedding().for_pool(pool.name)
        load = state.load
        tiers = PRIORITY[: PRIORITY.index(tier) + 1] if load.by_priority else PRIORITY
        ahead = self._queue.cluster_held_in(pool.name, tiers)
        if at_admission:
            ahead = max(0, ahead - 1)  # not itself
        per_second = self._queue.release_rate(pool.name)
        if per_second is None and cost > 0:
            per_second = state.capacity(pool) / cost
        engine_queue = engine_queue_seconds(ahead, load.seats, per_second)
        times = self._queue.first_tokens
        rest = times.most_took(tier, pool.name, at_admission)
        growth = 0.0 if at_admission else times.growth(tier, pool.name)
        return FirstTokenForecast(engine_queue, rest, growth)

    def probe(self, tier: Tier, pool: Pool, forecast: FirstTokenForecast) -> bool:
        """Whether a stream foreseen past its target is let through to be timed: when what
        its tier's streams took lately makes it late, not the engines' queue as it stands,
        and none was timed for a while (forecast.FirstTokenTimes.probe)."""
        if forecast.engine_queue >= pool.slo[tier].ttft_ms / 1000:
            return False
        return self._queue.first_tokens.probe(tier, pool.name)
