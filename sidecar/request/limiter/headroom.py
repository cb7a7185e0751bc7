"""Admissions from a bucket's known headroom, charged behind them.

Most of a tier bucket's day is spent far from empty, where Redis's answer is known before
it is asked; asking it anyway costs every decision a round trip and the script's time.
So a sidecar keeps each tier bucket's level as Redis last told it (every answer says it)
and, while the bucket holds more than its reserve — half its burst, or the fair shares'
reserve when that is more — beyond what this sidecar has taken since, admits at once.
The shared bucket is charged behind: one call within `interval` seconds for each tier,
tenant and pool, their admissions summed (charge.lua: the level, the admission record
for the pool's projected load, the tenant's fair share), or at once before this sidecar
asks Redis about the bucket, so that Redis decides on a level that holds them. Its answer
is the next reading.

Between two readings a sidecar takes at most its share of the headroom (the reserve
kept, divided by the sidecars alive): together they do not take the bucket below its
reserve on what they read, and Redis's own answers take over from there, so a contended
bucket decides exactly as without this. A charge behind is taken whether the bucket
holds it or not (into debt, within its most): over time the buckets charge exactly what
was admitted; at worst, when readings crossed, the reserve is spent and the bucket runs
into debt. Every decision still asks Redis for:

- a tenant's own budget (its level is not read), or another pool's budgets offered;
- a level older than MAX_AGE_SECONDS (an idle sidecar's reading may be far off);
- a bucket that refused a request within CONTENDED_SECONDS: contended, its line and its
  fair shares are Redis's to keep.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sidecar.budget_layout import AdmittedLoad
from sidecar.request.limiter.buckets import (
    Alternative,
    BucketSpec,
    ChargingLimiter,
    LaterRecord,
    Verdict,
)

log = logging.getLogger(__name__)

# A reading older than this is not admitted on: the others may have taken the bucket down.
MAX_AGE_SECONDS = 0.5
# A bucket that refused a request this recently is contended: Redis decides (the line,
# the fair shares) until it has not refused for this long.
CONTENDED_SECONDS = 1.0


@dataclass
class _Batch:
    """Admissions of one bucket (and tenant) not yet charged."""

    tokens: float = 0.0
    admissions: int = 0
    blocks: int = 0
    load: AdmittedLoad | None = None  # the first admission's, its blocks the sum
    recorded: LaterRecord = field(default_factory=LaterRecord)

    def add(self, cost: float, load: AdmittedLoad | None) -> None:
        self.tokens += cost
        self.admissions += 1
        if load is not None:
            self.blocks += load.blocks
            self.load = self.load or load

    def summed_load(self) -> AdmittedLoad | None:
        if self.load is None:
            return None
        return AdmittedLoad(self.load.tier, self.load.pool, self.blocks)


class Headroom:
    """A limiter that admits from the headroom it knows and asks `inner` the rest."""

    def __init__(
        self,
        inner: ChargingLimiter,
        sidecars_alive: Callable[[], int],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._sidecars_alive = sidecars_alive
        self._interval = interval
        self._clock = clock
        self._levels: dict[str, tuple[float, float]] = {}  # key → (level, when read)
        self._refused: dict[str, float] = {}  # key → when it last refused a request
        self._taken: dict[str, float] = {}  # key → tokens admitted here, not in a reading
        self._batches: dict[BucketSpec, _Batch] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._sending: dict[asyncio.Task[None], str] = {}  # charges in flight: bucket key
        self.admitted = 0  # decisions made here
        self.charges_lost = 0  # admissions whose charge failed

    async def acquire(
        self,
        cost: float,
        buckets: Sequence[BucketSpec],
        load: AdmittedLoad | None = None,
        otherwise: Alternative | None = None,
    ) -> Verdict:
        if otherwise is None and len(buckets) == 1:
            verdict = self._from_headroom(cost, buckets[0], load)
            if verdict is not None:
                return verdict
        if buckets and (self._batches or self._sending):  # a level Redis has all of
            await self._charged(buckets[0].key)
        verdict = await self._inner.acquire(cost, buckets, load, otherwise)
        if buckets and not verdict.elsewhere:
            self._read(buckets[0], verdict)
        return verdict

    async def settle(self, delta: float, buckets: Sequence[BucketSpec]) -> float | None:
        level = await self._inner.settle(delta, buckets)
        if level is not None and buckets:
            self._levels[buckets[0].key] = (level, self._clock())
        return level

    def _from_headroom(
        self, cost: float, bucket: BucketSpec, load: AdmittedLoad | None
    ) -> Verdict | None:
        known = self._levels.get(bucket.key)
        if known is None:
            return None
        now = self._clock()
        level, read_at = known
        if now - read_at > MAX_AGE_SECONDS:
            return None
        if now - self._refused.get(bucket.key, float("-inf")) < CONTENDED_SECONDS:
            return None
        reserve = bucket.burst / 2
        if bucket.fair is not None:
            reserve = max(reserve, bucket.fair.reserve)
        taken = self._taken.get(bucket.key, 0.0)
        share = (min(level, bucket.burst) - reserve) / max(1, self._sidecars_alive())
        if taken + cost > share:
            return None
        self._taken[bucket.key] = taken + cost
        batch = self._batches.get(bucket)
        if batch is None:
            batch = self._batches[bucket] = _Batch()
        batch.add(cost, load)
        self.admitted += 1
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._send_all)
        return Verdict(True, remaining=level - taken - cost, recorded_later=batch.recorded)

    def _read(self, bucket: BucketSpec, verdict: Verdict) -> None:
        """Redis answered for `bucket`: its level now; a refusal by it, that it is
        contended."""
        now = self._clock()
        self._levels[bucket.key] = (verdict.remaining, now)
        if (
            not verdict.allowed
            and verdict.refused is not None
            and verdict.refused.key == bucket.key
        ):
            self._refused[bucket.key] = now

    def _send_all(self) -> None:
        self._timer = None
        batches, self._batches = self._batches, {}
        for bucket, batch in batches.items():
            self._launch(bucket, batch)

    async def _charged(self, key: str) -> None:
        """What was admitted from the bucket `key` is charged, before Redis is asked about
        it: the batches not sent yet now, and those on their way answered (on another
        connection, Redis might run the question before them)."""
        for bucket in [b for b in self._batches if b.key == key]:
            self._launch(bucket, self._batches.pop(bucket))
        due = {task for task, charging in self._sending.items() if charging == key}
        if due:
            # Waited on, not awaited: a decision given up on does not cancel its charges.
            await asyncio.wait(due)

    async def landed(self) -> None:
        """Every charge sent so far has its answer."""
        if self._sending:
            await asyncio.wait(set(self._sending))

    def _launch(self, bucket: BucketSpec, batch: _Batch) -> None:
        task = asyncio.get_running_loop().create_task(self._send(bucket, batch))
        self._sending[task] = bucket.key
        task.add_done_callback(self._sending.pop)

    async def _send(self, bucket: BucketSpec, batch: _Batch) -> None:
        try:
            charged = await self._inner.charge(
                batch.tokens, bucket, batch.summed_load(), batch.admissions
            )
        except Exception:  # a task of its own: nobody else would see it fail
            log.exception("charging %d admissions behind them failed", batch.admissions)
            self.charges_lost += batch.admissions
            batch.recorded.made(0)
            return
        finally:
            self._taken[bucket.key] = max(0.0, self._taken.get(bucket.key, 0.0) - batch.tokens)
        now = self._clock()
        self._levels[bucket.key] = (charged.level, now)
        batch.recorded.made(charged.recorded_us)

    async def start(self) -> None:
        """Charges are sent as admissions come."""

    async def stop(self) -> None:
        """What was admitted is charged before the sidecar goes."""
        if self._timer is not None:
            self._timer.cancel()
            self._send_all()
        await self.landed()
