"""The one asyncio task a component runs in the background until it is stopped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


class Background:
    def __init__(self) -> None:
        self._task: asyncio.Task[Any] | None = None

    def start(self, work: Coroutine[Any, Any, Any], name: str) -> None:
        self._task = asyncio.create_task(work, name=name)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
