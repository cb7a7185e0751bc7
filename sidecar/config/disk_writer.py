"""One file kept current on disk, off the event loop: the newest value given is written,
one write at a time; values given meanwhile fold into the newest, and a write that fails
is tried again (a full disk, a volume briefly away) until a newer value or a success."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from sidecar.background import Background

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRY_SECONDS = 1.0


class LatestOnDisk(Generic[T]):
    def __init__(self, write: Callable[[T], None], what: str) -> None:
        self._write = write
        self._what = what
        self._pending: T | None = None
        self._wanted = asyncio.Event()
        self._background = Background()
        self.written: T | None = None  # the last value on disk
        self.caught_up = asyncio.Event()  # set while the newest value given is on disk
        self.failures = 0
        self._failing: str | None = None

    def failure_count(self) -> float:
        """The writes that failed so far: a gauge's reading."""
        return float(self.failures)

    def submit(self, value: T) -> None:
        self._pending = value
        self.caught_up.clear()
        self._wanted.set()

    async def start(self) -> None:
        self._background.start(self._run(), f"write {self._what}")

    async def stop(self) -> None:
        await self._background.stop()
        if self._pending is not None:  # the last change, on the way out
            await self._once()

    async def _run(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            if not await self._once():
                await asyncio.sleep(RETRY_SECONDS)
                if self._pending is None:
                    continue
                self._wanted.set()

    async def _once(self) -> bool:
        value, self._pending = self._pending, None
        if value is None:
            return True
        try:
            await asyncio.to_thread(self._write, value)
        except OSError as error:
            self.failures += 1
            if self._pending is None:
                self._pending = value  # tried again unless a newer one came
            why = str(error)
            if why != self._failing:  # once per problem, not every second
                log.error("%s not written: %s; retrying", self._what, why)
            self._failing = why
            return False
        if self._failing is not None:
            log.info("%s written again", self._what)
        self._failing = None
        self.written = value
        if self._pending is None:
            self.caught_up.set()
        return True
