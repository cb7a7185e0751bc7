"""Stopping within a bound: whatever Redis, Envoy or a peer does while a sidecar stops,
it is gone within its drain grace and EXIT_SECONDS of the signal."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Awaitable

log = logging.getLogger(__name__)

# Each step of stopping after the drain may take this long (a Redis gone mid-drain: its
# calls wait their socket timeouts, its reconnections must not hold the exit).
STEP_SECONDS = 2.0
# Past the drain grace, the whole exit may take this long before the process ends
# itself, whatever holds it (a blocked event loop included).
EXIT_SECONDS = 10.0


async def bounded(step: Awaitable[object]) -> None:
    try:
        await asyncio.wait_for(step, STEP_SECONDS)
    except TimeoutError:
        log.warning("a part did not stop within %s s: left behind", STEP_SECONDS)
    except Exception:  # stopping goes on whatever one part raises
        log.exception("a part failed to stop")


def exit_after(seconds: float) -> threading.Timer:
    """A thread that ends the process `seconds` from now unless cancelled: the bound on
    stopping that holds even when the event loop does not run."""

    def end() -> None:
        log.error("not stopped within %.0f s of the signal: exiting now", seconds)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()
    return timer
