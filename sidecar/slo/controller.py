"""The SLO monitor on every sidecar, and the controller on the one holding the lease.

Every tick each sidecar reads the cluster's sample windows and computes each tier's
compliance (metrics, dashboard). The lease holder also applies the control law to P0's
compliance and, when it moves budget, writes the new shares with the reason to Redis: a
config change every sidecar applies within a second, and a line in the history.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.schema import Tier
from sidecar.config.store import ConfigStore, Snapshot
from sidecar.slo.control import Adjustment, Compliance, adjust
from sidecar.slo.lease import Lease
from sidecar.slo.samples import SampleStore, compliance

log = logging.getLogger(__name__)


class SloController:
    def __init__(
        self,
        samples: SampleStore,
        store: ConfigStore,
        lease: Lease,
        snapshot: Callable[[], Snapshot],
        clock: Callable[[], float] = time.monotonic,
        on_adjust: Callable[[Adjustment], None] | None = None,
    ) -> None:
        self._samples = samples
        self._store = store
        self._lease = lease
        self._snapshot = snapshot
        self._clock = clock
        self._on_adjust = on_adjust
        self.compliance: dict[Tier, Compliance] = {t: Compliance(None, 0) for t in Tier}
        self.leading = False
        self.last_adjusted_at: float | None = None
        self._background = Background()

    async def start(self) -> None:
        self._background.start(self._run(), "slo-controller")

    async def stop(self) -> None:
        await self._background.stop()

    async def tick(self) -> Adjustment | None:
        snapshot = self._snapshot()
        config = snapshot.config
        windows = await self._samples.read(config.slo.window)
        self.compliance = {
            tier: compliance(
                windows[tier], config.slo.max_sample_age_seconds, config.slo.min_samples
            )
            for tier in Tier
        }
        was_leading = self.leading
        # The key lives one tick less than the lease: renewed every tick, it never runs
        # out while its holder lives, and a follower's next tick after it runs out falls
        # within the lease time of the holder's death.
        controller = config.controller
        self.leading = await self._lease.hold(
            controller.lease_seconds - controller.interval_seconds
        )
        if self.leading != was_leading:
            log.info(
                "SLO controller lease " + ("taken" if self.leading else "lost"),
                extra={"holder": self._lease.holder},
            )
            if self.leading:  # a new controller waits a cooldown before its first move
                self.last_adjusted_at = self._clock()
        if not (self.leading and config.controller.enabled):
            return None
        shares = {tier: snapshot.share(tier) for tier in Tier}
        step = adjust(
            shares,
            self.compliance[Tier.P0],
            config.controller,
            self._clock(),
            self.last_adjusted_at,
        )
        if step is None:
            return None
        await self._store.save_shares(step.shares, step.reason)
        self.last_adjusted_at = self._clock()
        log.info(
            "SLO controller moved budget: %s",
            step.reason,
            extra={"shares": {t.value: round(v, 4) for t, v in step.shares.items()}},
        )
        if self._on_adjust is not None:
            self._on_adjust(step)
        return step

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._snapshot().config.controller.interval_seconds)
            try:
                await self.tick()
            except redis.RedisError as error:
                redis_errors.note("slo")
                self.leading = False
                log.debug("SLO tick failed: %s", error)
