"""The files a sidecar is given (`serve --config-file`, `--tenants-file`), applied at start
and whenever one changes, looked at twice a second: a mounted ConfigMap or Secret is
swapped behind a symlink, so its content is what is compared. Only a change of the file
is applied, not every difference from Redis: while a rollout runs old pods beside new
ones, each with its own version of the file, they do not write in turn. A file that does
not read or validate is refused whole, logged once, and reported (the metric
`qos_config_file_refused{file}`, `/readyz`); the last good configuration serves.

A file is read again only when its metadata changed (inode, size, modification time), and
read and validated by a process of its own (config/file_reader.py), off the event loop
that decides requests. A tenants file
that would remove more than `max_revoked_share` of the tenants it declared (and more than
one) is refused too: an editor's half-written file, or a mount that lost its content, is
not taken for the operators' wish to revoke them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.declared import (
    HeldTenants,
    StoreMoved,
    TenantsPlan,
    write_config,
    write_tenants,
)
from sidecar.config.file_reader import read_apart
from sidecar.config.files import FileRefused, Read
from sidecar.config.snapshot import Snapshot
from sidecar.config.store import ConfigStore, StoreLost, StorePartlyLost
from sidecar.config.watcher import ConfigWatcher

log = logging.getLogger(__name__)


class FileWatch:
    def __init__(
        self,
        watcher: ConfigWatcher,
        store: ConfigStore,
        config_file: Path | None,
        tenants_file: Path | None,
        every_seconds: float = 0.5,
        max_revoked_share: float = 0.5,
    ) -> None:
        self._watcher = watcher
        self._store = store
        self._config_file = config_file
        self._tenants_file = tenants_file
        self._every = every_seconds
        self._max_revoked_share = max_revoked_share
        self.refused: dict[str, str] = {}  # file → why, while it is refused
        self._applied: dict[str, str] = {}  # file → the content's fingerprint, once applied
        # file → its metadata and the snapshot held when last read, and what the read gave
        self._read: dict[str, tuple[tuple[object, ...], Read | FileRefused]] = {}
        self._background = Background()

    @property
    def files(self) -> list[Path]:
        return [path for path in (self._config_file, self._tenants_file) if path is not None]

    def refusal_of(self, path: Path) -> Callable[[], float]:
        """1.0 while `path` is refused, else 0.0: a gauge's reading."""
        return lambda: float(str(path) in self.refused)

    async def start(self) -> None:
        if not self.files:
            return
        await self.apply()
        self._background.start(self._run(), "config-files")

    async def stop(self) -> None:
        await self._background.stop()

    async def apply(self) -> None:
        """Read each file, and write what it declares where the store differs."""
        try:
            if self._config_file is not None:
                await self._apply(self._config_file, "config", self._write_config)
            if self._tenants_file is not None:
                await self._apply(self._tenants_file, "tenants", self._write_tenants)
        except (StoreLost, StorePartlyLost):
            pass  # Redis lost (parts of) the configuration: the watcher puts it back first
        except StoreMoved:
            # Changed since the tenants file's plan: plan again on what it now holds.
            await self._watcher.refresh()
        except redis.RedisError as error:
            redis_errors.note("config")
            log.debug("a configuration file not applied: %s", error)

    async def _apply(
        self,
        path: Path,
        kind: str,
        write: Callable[[Snapshot, Any, str], Awaitable[bool]],
    ) -> None:
        found = await self._read_if_changed(path, kind)
        if isinstance(found, FileRefused):
            self._refuse(path, str(found))
            return
        if self._applied.get(str(path)) == found.fingerprint:
            self._accept(path)
            return  # no change of the file since it was applied
        try:
            written = await write(self._watcher.current, found.declared, str(path))
        except FileRefused as error:
            self._refuse(path, str(error))
            return
        self._accept(path)
        if written:
            log.info("configuration file applied", extra={"file": str(path)})
            await self._watcher.refresh()
        self._applied[str(path)] = found.fingerprint

    async def _read_if_changed(self, path: Path, kind: str) -> Read | FileRefused:
        """The file read again when it changed; a tenants file's plan also when the
        snapshot it was made against is no longer the one held, unless it is applied."""
        held = self._watcher.current
        seen = _metadata(path)
        if not seen:  # nothing to read: no process for it
            return FileRefused(f"{path} refused: {os.strerror(errno.ENOENT)}")
        against = (held.store_id, held.version) if kind == "tenants" else ()
        last = self._read.get(str(path))
        if last is not None and last[0][:-1] == (*seen,):
            found = last[1]
            settled = isinstance(found, FileRefused) or (
                self._applied.get(str(path)) == found.fingerprint
            )
            if settled or last[0][-1] == against:
                return found
        stdin = HeldTenants.of(held) if kind == "tenants" else b""
        found = await read_apart(kind, path, stdin)
        self._read[str(path)] = ((*seen, against), found)
        return found

    async def _write_config(self, held: Snapshot, config: Any, path: str) -> bool:
        return await write_config(self._store, held, config, path)

    async def _write_tenants(self, held: Snapshot, plan: TenantsPlan, path: str) -> bool:
        allowed = plan.max_revoked_share
        allowed = self._max_revoked_share if allowed is None else allowed
        taken = plan.revoked
        if taken.beyond(allowed):
            raise FileRefused(
                f"{path} refused: it would revoke {taken}, more than the share of "
                f"{allowed:g} allowed at once (a change meant so says max_revoked_share "
                "in the file, or the sidecars allow more: --tenants-file-max-revoked-share)"
            )
        # A new version over parts lost would carry the loss on: they are put back first.
        if not await self._store.whole():
            raise StorePartlyLost("parts of the configuration in Redis are lost")
        return await write_tenants(self._store.client, plan)

    def _refuse(self, path: Path, why: str) -> None:
        if self.refused.get(str(path)) != why:  # once per problem, not every look
            log.error("%s; the configuration in force stays", why)
        self.refused[str(path)] = why

    def _accept(self, path: Path) -> None:
        if self.refused.pop(str(path), None) is not None:
            log.info("configuration file accepted again", extra={"file": str(path)})

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._every)
            try:
                await self.apply()
            except Exception:  # the loop outlives anything the client library raises
                redis_errors.note("config")
                log.exception("applying the configuration files failed")


def _metadata(path: Path) -> tuple[int, ...]:
    """What changes when the file does, a mounted one swapped behind its link included
    (stat follows the link); () when there is no file."""
    try:
        facts = path.stat()
    except OSError:
        return ()
    return (facts.st_dev, facts.st_ino, facts.st_size, facts.st_mtime_ns)
