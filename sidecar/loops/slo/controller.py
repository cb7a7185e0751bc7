"""The SLO monitor on every sidecar, and the controller on the one holding the lease.

Every tick each sidecar reads the cluster's sample windows and computes each pool's
tiers' compliance (metrics, dashboard). The lease holder also applies the control law to
each pool's P0 compliance and, when it moves budget, writes that pool's new shares with
the reason to Redis: a config change every sidecar applies within a second, and a line
in the history.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.base import Tier
from sidecar.config.pools import DEFAULT_POOL, Pool
from sidecar.config.snapshot import Snapshot
from sidecar.config.store import ConfigStore, StoreLost, StorePartlyLost
from sidecar.loops.slo.control import Adjustment, Compliance, adjust
from sidecar.loops.slo.lease import Lease
from sidecar.loops.slo.samples import SampleStore

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
        # Per pool and tier, as last measured.
        self.pool_compliance: dict[str, dict[Tier, Compliance]] = {}
        self.leading = False
        self.adjusted_at: dict[str, float] = {}  # per pool: the controller's last move
        self._background = Background()

    @property
    def compliance(self) -> dict[Tier, Compliance]:
        """The default pool's (an unpooled configuration's only)."""
        return self.pool_compliance.get(DEFAULT_POOL) or {t: Compliance(None, 0) for t in Tier}

    async def start(self) -> None:
        self._background.start(self._run(), "slo-controller")

    async def stop(self) -> None:
        await self._background.stop()

    async def tick(self) -> Adjustment | None:
        """Measure every pool; if leading, move budget in each pool whose P0 asks for it.
        Returns the default pool's move (the last pool's when it has none)."""
        snapshot = self._snapshot()
        config = snapshot.config
        self.pool_compliance = await self._samples.compliance(config.slo, snapshot.pools.names)
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
                self.adjusted_at = dict.fromkeys(snapshot.pools.names, self._clock())
        if not (self.leading and config.controller.enabled):
            return None
        moved = None
        for pool in snapshot.pools:
            step = await self._steer(snapshot, pool)
            if step is not None and (moved is None or pool.name == DEFAULT_POOL):
                moved = step
        return moved

    async def _steer(self, snapshot: Snapshot, pool: Pool) -> Adjustment | None:
        """One pool's move, by its own P0 compliance and shares: one pool's trouble moves
        only that pool's budget."""
        shares = {tier: snapshot.share(tier, pool) for tier in Tier}
        measured = self.pool_compliance.get(pool.name, {})
        step = adjust(
            shares,
            measured.get(Tier.P0, Compliance(None, 0)),
            snapshot.config.controller,
            self._clock(),
            self.adjusted_at.get(pool.name),
        )
        if step is None:
            return None
        try:
            # Only into the store it read, and whole: never a fresh document over a lost
            # one, nor a new version over parts lost (it would carry the loss on).
            await self._store.save_shares(
                step.shares,
                step.reason,
                pool.name,
                snapshot.store_id,
                before=shares,
                whole=self._store.whole,
            )
        except (StoreLost, StorePartlyLost):
            log.warning("SLO controller: Redis lost the configuration; no move until it is back")
            return None
        self.adjusted_at[pool.name] = self._clock()
        log.info(
            "SLO controller moved budget: %s",
            step.reason,
            extra={
                "pool": pool.name,
                "shares": {t.value: round(v, 4) for t, v in step.shares.items()},
            },
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
