"""Each sidecar, once a second: adds what it decided since the last second (and the first
tokens it timed) to the cluster's history with the gauges it sees, then reads the
history's newest seconds back into its window. The page's data is built from the window
at most once a second, not per request, so ten open pages cost what one does."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections import Counter

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.audit import AuditEntry
from sidecar.config.base import Tier
from sidecar.operator.gateway_view import GatewayView
from sidecar.operator.history import page
from sidecar.operator.history.store import HistoryStore
from sidecar.operator.history.window import SECONDS, Window, ttft_bucket

log = logging.getLogger(__name__)
REREAD_SECONDS = 3  # a second is read again until every sidecar's add to it is in
FILL_SECONDS = 30  # seconds read a call while the window fills
EVENTS_KEPT = 100  # changes and controller moves shown


class HistoryRecorder:
    def __init__(self, store: HistoryStore, gateway: GatewayView) -> None:
        self._store = store
        self._gateway = gateway
        self._background = Background()
        self._decided: dict[tuple[str, ...], float] = {}  # the decision counters, last read
        self._ttft: Counter[str] = Counter()  # first tokens timed since the last add
        self.window = Window()
        self._page: bytes | None = None  # the page's data, built when asked, once a tick
        self._page_gzip: bytes | None = None  # the same, compressed, when a page asks so
        self._filled = False
        self._events_version: int | None = None  # the configuration version events are of
        self._switches: list[AuditEntry] = []
        self._moves: list[dict] = []

    def first_token(self, tier: Tier, pool: str, seconds: float) -> None:
        self._ttft[f"t|{pool}|{tier.value}|{ttft_bucket(seconds)}"] += 1

    async def start(self) -> None:
        self._background.start(self._run(), "history")

    async def stop(self) -> None:
        await self._background.stop()

    async def _run(self) -> None:
        # At a fixed rate, not a fixed pause: a second every tick, or a sidecar's tick
        # drifts and now and then skips a second of Redis's clock (a dip, then a double).
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            try:
                await self.tick()
            except (redis.RedisError, OSError) as error:
                redis_errors.note("history")
                log.debug("history not kept this second: %s", error)
                self._filled = False  # what others added meanwhile is read again, whole
            next_at = max(next_at + 1.0, loop.time())  # behind (a stall): on from now
            await asyncio.sleep(next_at - loop.time())

    async def tick(self) -> None:
        ttft, self._ttft = self._ttft, Counter()
        await self._store.add({**self._decisions(), **ttft}, self._gauges())
        if not self._filled:  # the whole window once (a start), then the newest seconds
            await self._fill()
        self._merge(*await self._store.last(REREAD_SECONDS))
        self.read_events()
        self._page = self._page_gzip = None  # built again when a page asks (none may)

    async def _fill(self) -> None:
        """The window, oldest stretch first, FILL_SECONDS a call: a sale's second holds
        a hundred fields a pool, and one script reading ten minutes of them would hold
        Redis (and every decision waiting on it) for tens of milliseconds."""
        for before in range(SECONDS - FILL_SECONDS, -1, -FILL_SECONDS):
            self._merge(*await self._store.last(FILL_SECONDS, before))
        self._filled = True

    def _merge(self, now: int, seconds: dict[int, dict[str, str]]) -> None:
        """The window ends with the last whole second: the current one is still being
        added to by the sidecars whose tick comes later in it (it is read next time)."""
        self.window.advance(now - 1)
        for second, fields in seconds.items():
            if second < now:
                self.window.merge(second, fields)

    @property
    def switches(self) -> list[AuditEntry]:
        """The last changes made by anyone but the controller (the mode's switches among
        them), newest first (as of the last read)."""
        return self._switches

    @property
    def moves(self) -> list[dict]:
        """The controller's last moves, newest first (as of the last read)."""
        return self._moves

    def read_events(self) -> None:
        """The changes and controller moves, from the configuration in force (which
        holds them), read again only when its version moved (both bump it): once a
        tick, and when a switch is made here."""
        snapshot = self._gateway.watcher.current
        if snapshot.version == self._events_version:
            return
        self._switches = [
            entry
            for text in snapshot.audit[:EVENTS_KEPT]
            if (entry := AuditEntry.from_json(text)) is not None
        ]
        self._moves = [json.loads(text) for text in snapshot.moves[:EVENTS_KEPT]]
        self._events_version = snapshot.version

    @property
    def page(self) -> bytes:
        """The page's JSON (history/page.py): built at most once a second, however many
        pages ask, and not at all while none does."""
        if self._page is None:
            series = self.window.series()
            since = series["start"] or 0
            document = page.build(
                series,
                page.lines(self._gateway.watcher.current),
                page.events(self._switches, self._moves, since),
            )
            self._page = json.dumps(document).encode()
        return self._page

    @property
    def page_gzip(self) -> bytes:
        """The page's JSON gzipped (a tenth of its size: a wall screen far from the
        gateway), compressed at most once a second too."""
        if self._page_gzip is None:
            self._page_gzip = gzip.compress(self.page, compresslevel=5)
        return self._page_gzip

    def _decisions(self) -> dict[str, float]:
        """What this sidecar decided since the last call, by pool, tier and outcome."""
        added: dict[str, float] = {}
        for metric in self._gateway.decisions.collect():
            for sample in metric.samples:
                if not sample.name.endswith("_total"):
                    continue
                labels = sample.labels
                key = (labels["pool"], labels["tier"], labels["outcome"], labels["reason"])
                delta = sample.value - self._decided.get(key, 0.0)
                self._decided[key] = sample.value
                if delta > 0 and labels["tier"] != "none":
                    kind = "admit" if labels["outcome"] == "admit" else labels["reason"]
                    name = f"d|{labels['pool']}|{labels['tier']}|{kind}"
                    added[name] = added.get(name, 0.0) + delta
        overflowed = self._gateway.overflowed
        for metric in overflowed.collect() if overflowed is not None else ():
            for sample in metric.samples:
                if not sample.name.endswith("_total"):
                    continue
                labels = sample.labels
                key = ("o", labels["to_pool"], labels["tier"], labels["from_pool"])
                delta = sample.value - self._decided.get(key, 0.0)
                self._decided[key] = sample.value
                if delta > 0:
                    added["|".join(key)] = delta
        return added

    def _gauges(self) -> dict[str, str]:
        gateway = self._gateway
        snapshot = gateway.watcher.current
        gauges = {"g|mode": snapshot.mode.mode.value}
        for pool in snapshot.pools:
            state = gateway.monitor.state.for_pool(pool.name)
            name = pool.name
            gauges[f"g|{name}|in_flight"] = str(gateway.queue.cluster_in_flight_in(name))
            gauges[f"g|{name}|max_concurrency"] = str(pool.fleet.max_concurrency)
            free = state.load.as_reported.free_kv_ratio
            projected = state.load.free_kv_ratio
            gauges[f"g|{name}|free_kv"] = "" if free is None else f"{free:.4f}"
            gauges[f"g|{name}|projected_free_kv"] = "" if projected is None else f"{projected:.4f}"
            for tier in Tier:
                gauges[f"g|{name}|share|{tier.value}"] = f"{snapshot.share(tier, pool):.4f}"
                rule = state.shedding[tier]
                gauges[f"g|{name}|shedding|{tier.value}"] = rule.value if rule else ""
        return gauges
