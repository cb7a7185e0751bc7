"""The files a sidecar is given (`serve --config-file`, `--tenants-file`), applied at start
and whenever one changes, looked at every second: a mounted ConfigMap or Secret is
swapped behind a symlink, so its content is what is compared. Only a change of the file
is applied, not every difference from Redis: while a rollout runs old pods beside new
ones, each with its own version of the file, they do not write in turn. A file that does
not read or validate is refused whole, logged once, and reported (the metric
`qos_config_file_refused{file}`, `/readyz`); the last good configuration serves."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.background import Background
from sidecar.config.declared import write_config, write_tenants
from sidecar.config.files import FileRefused, Read, read_config, read_tenants
from sidecar.config.store import ConfigStore, Snapshot, StoreLost
from sidecar.config.watcher import ConfigWatcher

log = logging.getLogger(__name__)


class FileWatch:
    def __init__(
        self,
        watcher: ConfigWatcher,
        store: ConfigStore,
        config_file: Path | None,
        tenants_file: Path | None,
        every_seconds: float = 1.0,
    ) -> None:
        self._watcher = watcher
        self._store = store
        self._config_file = config_file
        self._tenants_file = tenants_file
        self._every = every_seconds
        self.refused: dict[str, str] = {}  # file → why, while it is refused
        self._applied: dict[str, str] = {}  # file → the content's fingerprint, once applied
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
                await self._apply(self._config_file, read_config, self._write_config)
            if self._tenants_file is not None:
                await self._apply(self._tenants_file, read_tenants, self._write_tenants)
        except StoreLost:
            pass  # Redis lost the configuration: the watcher puts it back first
        except redis.RedisError as error:
            redis_errors.note("config")
            log.debug("a configuration file not applied: %s", error)

    async def _apply(
        self,
        path: Path,
        read: Callable[[Path], Read],
        write: Callable[[Snapshot, Any, str], Awaitable[bool]],
    ) -> None:
        try:
            found = read(path)
        except FileRefused as error:
            self._refuse(path, str(error))
            return
        self._accept(path)
        if self._applied.get(str(path)) == found.fingerprint:
            return  # no change of the file since it was applied
        if await write(self._watcher.current, found.declared, str(path)):
            log.info("configuration file applied", extra={"file": str(path)})
            await self._watcher.refresh()
        self._applied[str(path)] = found.fingerprint

    async def _write_config(self, held: Snapshot, config: Any, path: str) -> bool:
        return await write_config(self._store, held, config, path)

    async def _write_tenants(self, held: Snapshot, tenants: Any, path: str) -> bool:
        return await write_tenants(self._store.client, held, tenants, path)

    def _refuse(self, path: Path, why: str) -> None:
        if self.refused.get(str(path)) != why:  # once per problem, not every second
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
