"""Keeps a sidecar's copy of the configuration current: pub/sub plus a version poll; and
puts it back when Redis lost it (config/recovery.py).

It starts from the last known good copy on disk (config/local_copy.py) when there is
one, so a sidecar started while Redis is away decides on what operators set. With no
copy and no Redis it holds what is safe (SAFE: core-only, no tenant known) until Redis
answers: unknown is never taken for "normal".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.config import recovery
from sidecar.config.audit import PROGRAM, Actor, AuditEntry
from sidecar.config.operator_state import Mode, OperatorMode
from sidecar.config.snapshot import Snapshot
from sidecar.config.store import (
    CHANGED_CHANNEL,
    REPAIR_HINT,
    ConfigInvalid,
    ConfigStore,
)

log = logging.getLogger(__name__)

# What a sidecar holds before Redis has answered when it has no copy of its own: only
# what core-only admits, and no tenant, so nothing it cannot tell from P2 goes upstream.
SAFE = Snapshot(version=0, mode=OperatorMode(mode=Mode.CORE_ONLY))


class Source:
    """Where the configuration in force came from."""

    REDIS = "redis"
    LOCAL_COPY = "local_copy"  # the copy on disk, Redis not reached yet
    SAFE = "safe"  # neither: SAFE

    ALL = (REDIS, LOCAL_COPY, SAFE)


class ConfigWatcher:
    """`current` is the last good snapshot; it is replaced only by one that validates.

    A sidecar that starts while the stored document does not validate has no last good
    version of its own: it serves the last document written through the store (or the
    defaults) and is not `ready` until an operator repairs the document. `problem` says
    what is wrong while Redis holds an invalid document, whether it started so or not."""

    def __init__(
        self,
        client: redis.Redis,
        poll_seconds: float = 0.5,
        initial: Snapshot | None = None,
        actor: Actor = PROGRAM,
    ) -> None:
        self._redis = client
        self._actor = actor  # who puts back a lost configuration: this sidecar
        self._store = ConfigStore(client)
        self._poll_seconds = poll_seconds
        self.current = initial or SAFE
        self.source = Source.LOCAL_COPY if initial is not None else Source.SAFE
        self._announced = False
        self.refused_version: int | None = None
        self.problem: str | None = None
        self._started_on_problem = False
        # Until Redis has answered once, the sidecar runs on defaults and local budgets.
        self.unreached: str | None = "Redis not asked yet"
        self._listeners: list[Callable[[Snapshot], None]] = []
        self._put_back_listeners: list[Callable[[Snapshot], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()

    @property
    def ready(self) -> bool:
        """False until Redis has answered once, and while the configuration it started on
        could not be read: it runs on a stand-in until the document validates."""
        return self.unreached is None and not self._started_on_problem

    @property
    def not_ready_because(self) -> str | None:
        """Why this sidecar should take no traffic (its pod out of the Service), or None.
        Without Redis it serves the last known good configuration from disk: ready, for
        taking every pod out while Redis is away would stop what core-only keeps going;
        holding only what is safe (no copy), it is not."""
        if self.unreached is not None and self.source != Source.LOCAL_COPY:
            return (
                f"Redis not reached ({self.unreached}): no copy of the configuration on "
                "disk: holding what is safe (core-only, no tenant known); budgets are this "
                "sidecar's alone until it is"
            )
        if self._started_on_problem:
            return f"{self.problem}\n{REPAIR_HINT}"
        return None

    @property
    def serving_without_redis(self) -> str | None:
        """What a ready sidecar without Redis says beside "ready", or None."""
        if self.unreached is None or self.source != Source.LOCAL_COPY:
            return None
        return (
            f"Redis not reached ({self.unreached}): deciding on the last known good "
            f"configuration, version {self.current.version} of store "
            f"{self.current.store_id}, from disk; budgets are this sidecar's alone until it is"
        )

    def snapshot(self) -> Snapshot:
        """The configuration in force, always the latest."""
        return self.current

    def on_change(self, listener: Callable[[Snapshot], None]) -> None:
        self._listeners.append(listener)

    def on_put_back(self, listener: Callable[[Snapshot], None]) -> None:
        """Called with the snapshot this sidecar put back into a store that lost it."""
        self._put_back_listeners.append(listener)

    async def start(self) -> None:
        try:
            await self.refresh()
        except redis.RedisError as error:
            redis_errors.note("config")
            self.unreached = str(error) or type(error).__name__
            if self.source == Source.LOCAL_COPY:
                log.error(
                    "Redis not reached (%s), NOT READY: deciding on the last known good "
                    "configuration from disk (version %s of store %s) until it is",
                    error,
                    self.current.version,
                    self.current.store_id,
                )
            else:
                log.error(
                    "Redis not reached (%s) and no copy of the configuration on disk, NOT "
                    "READY: holding what is safe (core-only, no tenant known) until it is",
                    error,
                )
        if not self._announced:  # what it holds from the start (a copy, or SAFE)
            self._announce(self.current)
        self._tasks = [
            asyncio.create_task(self._poll(), name="config-poll"),
            asyncio.create_task(self._listen(), name="config-listen"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def refresh(self) -> None:
        """Load the configuration if its version moved on since the last load."""
        async with self._lock:
            state = await recovery.read_state(self._redis)
            self.unreached = None
            held = self.current
            if recovery.lost(held, state):
                # What Redis lost is not a new configuration: keep the one held, and put
                # it back (or find it put back by another sidecar at the next look).
                await self._put_back(held, state)
                self.source = Source.REDIS
                return
            if held.version == 0 and not state.identity:
                await self._store.initialize()  # holding nothing: an empty store is new
            elif (state.version, state.identity) == (held.version, held.store_id):
                self.source = Source.REDIS
                return
            if state.version == self.refused_version:
                return
            version = state.version
            try:
                snapshot = await self._store.load()
            except ConfigInvalid as error:
                self.refused_version = version
                self.problem = str(error)
                if self.current.version == 0 and error.fallback is not None:
                    self.current = snapshot = error.fallback
                    self._started_on_problem = True
                    log.error(
                        "%s; serving the last document written through the CLI (or the "
                        "defaults) and NOT READY until the document is repaired (%s)",
                        error,
                        REPAIR_HINT,
                    )
                else:
                    log.error("%s; keeping version %s", error, self.current.version)
                    return
            else:
                self.problem = None
                self._started_on_problem = False
            previous, self.current = self.current, snapshot
            self.source = Source.REDIS
            log.info(
                "config loaded",
                extra={"version": snapshot.version, "tenants": len(snapshot.tenants)},
            )
            _log_changes(previous, snapshot)
        self._announce(snapshot)

    def _announce(self, snapshot: Snapshot) -> None:
        self._announced = True
        for listener in self._listeners:
            listener(snapshot)

    async def check(self) -> None:
        """Check the store as a whole: a part lost or changed behind the version held is
        put back (recovery.py); the checksum held is recorded for the commands to check."""
        held = self.current
        if not held.digest:
            return
        found = await recovery.check(self._redis)
        if found is None or (found.identity, found.version) != (held.store_id, held.version):
            return  # moved on, or lost as a whole: refresh() sees to it
        async with self._lock:
            if self.current is not held:
                return  # loaded or put back meanwhile
            if found.digest == held.digest:
                if found.recorded_for(held.version) != held.digest:
                    await recovery.record(self._redis, held)
            elif recovery.partly_lost(held, found):
                await self._put_back(held, found)
            else:
                # Put back by another sidecar, which recorded it: the same state as it
                # wrote it out.
                self.current = dataclasses.replace(held, digest=found.digest)

    async def _put_back(
        self, held: Snapshot, found: recovery.StoreState | recovery.StateCheck
    ) -> None:
        written = await recovery.put_back(self._redis, held, found, self._actor)
        if written is None:
            return  # another sidecar came first, or the store is no longer lost
        self.current = written
        if isinstance(found, recovery.StateCheck):
            log.warning(
                "Redis had lost or changed parts of the configuration behind its version "
                "%s: put back what version %s holds, with its %s tenants and %s API keys",
                found.version,
                held.version,
                len(held.tenants),
                len(held.api_keys),
            )
        else:
            log.warning(
                "Redis had lost the configuration (it held version %s of store %r): put "
                "back version %s of store %s, with its %s tenants and %s API keys",
                found.version,
                found.identity or None,
                held.version,
                held.store_id,
                len(held.tenants),
                len(held.api_keys),
            )
        for listener in self._put_back_listeners:
            listener(written)

    async def _poll(self) -> None:
        next_check = time.monotonic() + recovery.CHECK_SECONDS
        while True:
            await asyncio.sleep(self._poll_seconds)
            with contextlib.suppress(redis.RedisError):
                await self.refresh()
                if time.monotonic() >= next_check:
                    started = time.monotonic()
                    await self.check()
                    took = time.monotonic() - started
                    next_check = time.monotonic() + max(recovery.CHECK_SECONDS, 100 * took)

    async def _listen(self) -> None:
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(CHANGED_CHANNEL)
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            await self.refresh()
            except redis.RedisError as error:
                redis_errors.note("config")
                log.debug("config channel lost (%s); the poll covers until it is back", error)
                await asyncio.sleep(self._poll_seconds)


def _log_changes(previous: Snapshot, loaded: Snapshot) -> None:
    """Each change recorded since the snapshot held (none on the first load: the record
    is older than this sidecar), oldest first."""
    if previous.version == 0:
        return
    newer = list(loaded.audit)
    if previous.audit and previous.audit[0] in newer:
        newer = newer[: newer.index(previous.audit[0])]
    for text in reversed(newer):
        if (entry := AuditEntry.from_json(text)) is not None:
            log.info("changed: %s", entry.describe(), extra={"audit": entry.to_dict()})
