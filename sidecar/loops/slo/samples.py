"""Latency samples per pool and tier: recorded by every sidecar, windowed cluster-wide in
Redis.

Each sidecar buffers its samples and adds them to Redis every 250 ms (one call), where
each pool's tier keeps its last `slo.window` samples from all sidecars together.
Compliance is the share of a tier's fresh samples (younger than
`slo.max_sample_age_seconds`) that met the pool's target for the tier: time to first
token for streamed answers, total time otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.base import Tier
from sidecar.config.pools import DEFAULT_POOL, Pool
from sidecar.config.schema import QosConfig
from sidecar.config.slo_config import SloConfig
from sidecar.loops.slo.control import Compliance

log = logging.getLogger(__name__)

TTFT, LATENCY = "ttft", "latency"
Measured = tuple[bool, float, str]  # met, value in ms, kind
_PUSH = resources.files("sidecar.loops.slo").joinpath("push_samples.lua").read_text()
_READ = resources.files("sidecar.loops.slo").joinpath("read_samples.lua").read_text()


SAMPLES_PREFIX = "qos:{qos-slo}:samples:"


def samples_key(tier: Tier, pool: str = DEFAULT_POOL) -> str:
    """The default pool's keys are those from before pools."""
    if pool == DEFAULT_POOL:
        return f"{SAMPLES_PREFIX}{tier.value}"
    return f"{SAMPLES_PREFIX}{pool}:{tier.value}"


@dataclass(frozen=True)
class Sample:
    age_seconds: float
    met: bool
    value_ms: float
    kind: str


def met_target(
    config: QosConfig, tier: Tier, kind: str, seconds: float, pool: Pool | None = None
) -> bool:
    target = (pool.slo if pool else config.slo.targets)[tier]
    limit = target.ttft_ms if kind == TTFT else target.latency_ms
    return seconds * 1000 <= limit


def compliance(samples: list[Sample], max_age: float, min_samples: int) -> Compliance:
    """The share of the fresh samples that met their target (read_samples.lua counts
    a window in Redis the same way)."""
    fresh = [s for s in samples if s.age_seconds <= max_age]
    return counted(len(fresh), sum(s.met for s in fresh), min_samples)


def counted(fresh: int, met: int, min_samples: int) -> Compliance:
    if fresh < min_samples:
        return Compliance(None, fresh)
    return Compliance(met / fresh, fresh)


class SampleStore:
    def __init__(self, client: redis.Redis) -> None:
        self._push = client.register_script(_PUSH)
        self._read = client.register_script(_READ)

    async def push(self, batch: dict[tuple[str, Tier], list[Measured]], window: int) -> None:
        """Samples by (pool, tier), added to their windows in one call."""
        keys: list[str] = []
        args: list[str | int] = [window]
        for (pool, tier), samples in batch.items():
            keys.append(samples_key(tier, pool))
            args.append(len(samples))
            args += [f"{int(met)} {value:.1f} {kind}" for met, value, kind in samples]
        await self._push(keys=keys, args=args)

    async def compliance(
        self, slo: SloConfig, pools: Iterable[str] = (DEFAULT_POOL,)
    ) -> dict[str, dict[Tier, Compliance]]:
        """Each pool's tiers' compliance over their windows, counted in Redis (one call)."""
        wanted = [(pool, tier) for pool in pools for tier in Tier]
        keys = [samples_key(tier, pool) for pool, tier in wanted]
        args = [slo.window, slo.max_sample_age_seconds * 1000]
        counts = await self._read(keys=keys, args=args)
        result: dict[str, dict[Tier, Compliance]] = {}
        for (pool, tier), (fresh, met) in zip(wanted, counts, strict=True):
            result.setdefault(pool, {})[tier] = counted(int(fresh), int(met), slo.min_samples)
        return result


class SampleRecorder:
    """Buffers this sidecar's samples and adds them to the cluster's windows."""

    def __init__(
        self, store: SampleStore, config: Callable[[], QosConfig], flush_seconds: float = 0.25
    ) -> None:
        self._store = store
        self._config = config
        self._flush_seconds = flush_seconds
        self._buffer: dict[tuple[str, Tier], list[Measured]] = {}
        self._background = Background()
        self.recorded = 0

    def record(
        self,
        tier: Tier,
        kind: str,
        seconds: float,
        failed: bool = False,
        pool: Pool | None = None,
    ) -> None:
        """A sample of `pool` (default: the configuration's default pool)."""
        met = not failed and met_target(self._config(), tier, kind, seconds, pool)
        key = (pool.name if pool else DEFAULT_POOL, tier)
        self._buffer.setdefault(key, []).append((met, seconds * 1000, kind))
        self.recorded += 1

    async def flush(self) -> None:
        batch, self._buffer = self._buffer, {}
        if batch:
            await self._store.push(batch, self._config().slo.window)

    async def start(self) -> None:
        self._background.start(self._run(), "slo-samples")

    async def stop(self) -> None:
        await self._background.stop()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._flush_seconds)
            try:
                await self.flush()
            except redis.RedisError as error:
                redis_errors.note("slo")
                log.debug("samples not stored: %s", error)  # lost: they would go stale
