"""The event loop a server runs on: asyncio's, or uvloop's, by name."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from sidecar import event_loop


async def loop_kind() -> type:
    return type(asyncio.get_running_loop())


def test_each_loop_runs_the_server_coroutine_on_itself():
    assert event_loop.run(loop_kind(), "uvloop") is uvloop.Loop
    assert issubclass(event_loop.run(loop_kind(), "asyncio"), asyncio.BaseEventLoop)


def test_an_unknown_loop_is_refused_clearly():
    coroutine = loop_kind()
    with pytest.raises(SystemExit, match="one of asyncio, uvloop"):
        event_loop.run(coroutine, "trio")
    coroutine.close()
