"""Which event loop a server runs on: asyncio's own, or uvloop (the `uvloop` extra)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

LOOPS = ("asyncio", "uvloop")


def run(main: Coroutine[Any, Any, Any], loop: str = "asyncio") -> Any:
    if loop not in LOOPS:
        raise SystemExit(f"--event-loop: one of {', '.join(LOOPS)}, not {loop!r}")
    if loop == "asyncio":
        return asyncio.run(main)
    try:
        import uvloop
    except ImportError:
        main.close()
        raise SystemExit("--event-loop uvloop: pip install 'qos-sidecar[uvloop]'") from None
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
