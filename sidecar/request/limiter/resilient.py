"""Budgets that outlive a Redis outage.

While Redis answers, the shared buckets in Redis decide. When a call fails or takes longer
than `timeout` (a few milliseconds), the limiter goes local at once: each sidecar enforces
its share of every bucket in memory — the bucket's rate and burst divided by the sidecars
it last saw alive — and no request waits on Redis again until a background probe finds it
back (every 100 ms); then the shared buckets take over (redis-py reloads the script on
NOSCRIPT). Every switch is logged and counted.

A sidecar going local starts each tier's bucket at its share of the level Redis last told
it, not full: a burst the fleet already spent is not granted again at every switch (on a
starved machine a late event loop alone can miss the deadline, many times a minute).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator, Sequence

import redis.asyncio as redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sidecar import redis_errors
from sidecar.budget_layout import AdmittedLoad
from sidecar.request.limiter.buckets import (
    Alternative,
    BucketSpec,
    Charged,
    ChargingLimiter,
    Verdict,
)
from sidecar.request.limiter.headroom import Headroom
from sidecar.request.limiter.overlimit import OverLimitCache

log = logging.getLogger(__name__)

# Just after Redis is found back, a few calls may fail in a row before budgets go local
# again, for this long.
FAILURES_TO_GO_LOCAL = 3
RETURN_GRACE_SECONDS = 1.0
# How long the probe waits for Redis's answer (not a decision's deadline).
PROBE_TIMEOUT_SECONDS = 0.5


class LocalTokenBuckets:
    """In-memory token buckets, the same arithmetic as the Lua script's."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._state: dict[str, tuple[float, float]] = {}  # key → (tokens, at)

    def reset(self) -> None:
        self._state.clear()

    def seed(self, key: str, tokens: float, at: float) -> None:
        """The bucket held `tokens` at `at` (a monotonic time)."""
        self._state[key] = (tokens, at)

    def knows(self, key: str) -> bool:
        return key in self._state

    def acquire(self, cost: float, buckets: Sequence[BucketSpec]) -> Verdict:
        now = self._clock()
        levels = []
        refused, longest = None, 0.0
        for bucket in buckets:
            if cost > bucket.burst:
                return Verdict(False, refused=bucket, retry_after=None, remaining=bucket.burst)
            tokens, at = self._state.get(bucket.key, (bucket.burst, now))
            tokens = min(bucket.burst, tokens + max(0.0, now - at) * bucket.rate)
            levels.append(tokens)
            if tokens < cost and (wait := (cost - tokens) / bucket.rate) > longest:
                refused, longest = bucket, wait
        if refused is not None:
            return Verdict(False, refused=refused, retry_after=longest, remaining=levels[0])
        for bucket, tokens in zip(buckets, levels, strict=True):
            self._state[bucket.key] = (tokens - cost, now)
        return Verdict(True, remaining=levels[0] - cost)

    def settle(self, delta: float, buckets: Sequence[BucketSpec]) -> float | None:
        """settle.lua's arithmetic: refill, add `delta`, keep within [-max debt, burst]."""
        now = self._clock()
        levels = []
        for bucket in buckets:
            tokens, at = self._state.get(bucket.key, (bucket.burst, now))
            tokens = min(bucket.burst, tokens + max(0.0, now - at) * bucket.rate)
            levels.append(max(-bucket.max_debt, min(bucket.burst, tokens + delta)))
            self._state[bucket.key] = (levels[-1], now)
        return levels[0] if levels else None


class ResilientLimiter:
    def __init__(
        self,
        shared: ChargingLimiter,
        client: redis.Redis,
        sidecars_alive: Callable[[], int],
        timeout: float = 0.01,
        probe_seconds: float = 0.1,
    ) -> None:
        self._shared = shared
        self._redis = client
        self._sidecars_alive = sidecars_alive
        self._timeout = timeout
        self._probe_seconds = probe_seconds
        self._local = LocalTokenBuckets()
        self.degraded = False
        self.switches = 0
        self._failures = 0  # shared calls failed in a row
        self._shared_since = float("-inf")  # when the probe last found Redis back
        self._probe: asyncio.Task[None] | None = None
        # First bucket's key → (its level, when): what Redis said last, for the local
        # buckets to start from.
        self._shared_levels: dict[str, tuple[float, float]] = {}

    async def acquire(
        self,
        cost: float,
        buckets: Sequence[BucketSpec],
        load: AdmittedLoad | None = None,
        otherwise: Alternative | None = None,
    ) -> Verdict:
        if not self.degraded:
            try:
                # A deadline on this task, not a task of its own (as wait_for makes): the
                # decision path stays cheap.
                async with asyncio.timeout(self._timeout):
                    verdict = await self._shared.acquire(cost, buckets, load, otherwise)
                self._failures = 0
                if verdict.allowed or verdict.retry_after is not None:
                    taken_from = otherwise.buckets if verdict.elsewhere and otherwise else buckets
                    self._remember(taken_from, verdict.remaining)
                return verdict
            except (redis.RedisError, TimeoutError) as error:
                self._failed(error)
        # Decided here alone: the load is projected by this sidecar only (not recorded).
        shares = self._local_shares(buckets, cost)
        verdict = self._local.acquire(cost, shares)
        if verdict.refused is None:
            return verdict
        return dataclasses.replace(verdict, refused=buckets[shares.index(verdict.refused)])

    async def settle(self, delta: float, buckets: Sequence[BucketSpec]) -> float | None:
        if not self.degraded:
            try:
                async with asyncio.timeout(self._timeout):
                    level = await self._shared.settle(delta, buckets)
                if level is not None:
                    self._remember(buckets, level)
                return level
            except (redis.RedisError, TimeoutError) as error:
                self._failed(error)
        # The cost was taken whole from this sidecar's share: settled whole there too.
        return self._local.settle(delta, self._local_shares(buckets, 0.0))

    async def charge(
        self, tokens: float, bucket: BucketSpec, load: AdmittedLoad | None, admissions: int
    ) -> Charged:
        if not self.degraded:
            try:
                async with asyncio.timeout(self._timeout):
                    charged = await self._shared.charge(tokens, bucket, load, admissions)
                self._remember([bucket], charged.level)
                return charged
            except (redis.RedisError, TimeoutError) as error:
                self._failed(error)
        # Admitted against this sidecar's share: charged there, recorded nowhere.
        level = self._local.settle(-tokens, self._local_shares([bucket], 0.0))
        return Charged(bucket.burst if level is None else level, 0)

    def _remember(self, buckets: Sequence[BucketSpec], level: float) -> None:
        """Redis says the first of `buckets` holds `level` now."""
        if buckets:
            self._shared_levels[buckets[0].key] = (level, time.monotonic())

    def _local_shares(self, buckets: Sequence[BucketSpec], cost: float) -> list[BucketSpec]:
        """This sidecar's shares of `buckets` for a request of `cost`; the first local
        call on the first since Redis last answered for it starts from its share of what
        Redis said it held (refilled since, at the share's rate)."""
        shares = self._my_share(buckets, cost)
        seen = self._shared_levels.pop(shares[0].key, None) if shares else None
        if seen is not None:
            level, at = seen
            first = shares[0]
            self._local.seed(
                first.key, min(first.burst, level / max(1, self._sidecars_alive())), at
            )
        # The others (a tenant's), whose level Redis never says, start empty, refilling
        # at the share's rate: what the fleet spent of their bursts is not known, and
        # granting them whole at every switch would let flapping budgets admit far past
        # them.
        now = time.monotonic()
        for share in shares[1:]:
            if not self._local.knows(share.key):
                self._local.seed(share.key, 0.0, now)
        return shares

    def _failed(self, error: Exception) -> None:
        """This call is decided locally, and every call after it until the probe finds
        Redis back; but just after a return, only after a few failures in a row: the
        first calls to a master that just came back may miss the deadline while their
        connections are made, and must not switch the sidecar back and forth."""
        redis_errors.note("limiter")
        self._failures += 1
        returning = time.monotonic() - self._shared_since < RETURN_GRACE_SECONDS
        if not returning or self._failures >= FAILURES_TO_GO_LOCAL:
            self._go_local(error)

    def _my_share(self, buckets: Sequence[BucketSpec], cost: float) -> list[BucketSpec]:
        """Each bucket cut to this sidecar's share of its rate, while budgets are local.
        Its burst too, but never below one request the whole bucket holds: a share too
        small for it would refuse as never fitting a request that fits, where it only
        has to wait its turn at the share's rate."""
        share = max(1, self._sidecars_alive())
        return [
            dataclasses.replace(
                b,
                rate=b.rate / share,
                burst=max(b.burst / share, min(b.burst, cost)),
                debt=b.max_debt / share,
            )
            for b in buckets
        ]

    def _go_local(self, error: Exception) -> None:
        self.degraded = True
        self._failures = 0
        self.switches += 1
        self._local.reset()
        log.warning(
            "Redis unavailable (%s): enforcing budgets locally, 1/%d each",
            type(error).__name__,
            max(1, self._sidecars_alive()),
        )
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._wait_for_redis())

    async def _wait_for_redis(self) -> None:
        """Until Redis answers again: then budgets are shared again. Nothing may end this
        loop but that (an error of any kind from the client library, while it reconnects
        to a master that came back, would leave budgets local for good)."""
        said = False
        while True:
            await asyncio.sleep(self._probe_seconds)
            try:
                # Off the decision path: the probe may wait for a connection to be made
                # on a busy machine, where the decisions' deadline would give up on it.
                await asyncio.wait_for(self._redis.ping(), PROBE_TIMEOUT_SECONDS)
                warm = getattr(self._shared, "warm", None)
                if warm is not None:  # scripts in place before decisions need them
                    await asyncio.wait_for(warm(), 1.0)
            except (redis.RedisError, TimeoutError):
                continue
            except Exception as error:  # the client library's own trouble: keep probing
                if not said:  # once an outage
                    log.warning("probing Redis failed unexpectedly: %r", error)
                    said = True
                continue
            self._shared_since = time.monotonic()
            self.degraded = False
            self.switches += 1
            log.info("Redis is back: budgets are shared again")
            return

    async def start(self) -> None:
        """Nothing runs until Redis is lost: the probe starts then."""

    async def stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe


class DegradedCollector(Collector):
    def __init__(
        self,
        limiter: ResilientLimiter,
        overlimit: OverLimitCache | None = None,
        headroom: Headroom | None = None,
    ) -> None:
        self._limiter = limiter
        self._overlimit = overlimit
        self._headroom = headroom

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "qos_budgets_local",
            "1 while Redis is unreachable and this sidecar enforces its share of budgets alone.",
            value=1 if self._limiter.degraded else 0,
        )
        yield CounterMetricFamily(
            "qos_budget_mode_switches",
            "Switches between shared (Redis) and local budgets.",
            value=self._limiter.switches,
        )
        yield CounterMetricFamily(
            "qos_budget_refusals_cached",
            "Budget refusals answered from the over-limit cache, without a Redis call.",
            value=self._overlimit.hits if self._overlimit else 0,
        )
        yield CounterMetricFamily(
            "qos_budget_admitted_from_headroom",
            "Admissions from a bucket's known headroom, without waiting on Redis; charged "
            "behind them.",
            value=self._headroom.admitted if self._headroom else 0,
        )
        yield CounterMetricFamily(
            "qos_budget_charges_lost",
            "Admissions from headroom whose charge behind them failed (see the log).",
            value=self._headroom.charges_lost if self._headroom else 0,
        )
