"""Small clients for the integration tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from sidecar.stack.admin_client import StackConfig, scrape, sidecar_config_version

__all__ = ["StackConfig", "decision_count", "scrape", "sidecar_config_version", "wait_until"]


def decision_count(sidecar_admin_url: str, outcome: str = "admit", reason: str = "") -> float:
    """Decisions the sidecar counted with this outcome (and reason), over all tiers."""
    samples = scrape(f"{sidecar_admin_url}/metrics")
    wanted = f'outcome="{outcome}"'
    return sum(
        value
        for name, value in samples.items()
        if name.startswith("qos_decisions_total{")
        and wanted in name
        and (not reason or f'reason="{reason}"' in name)
    )


def admitted_count(sidecar_admin_url: str) -> float:
    return decision_count(sidecar_admin_url, "admit", "admitted")


async def wait_until(check: Callable[[], bool], within: float = 10.0, what: str = "") -> None:
    """Poll a remote state until it holds; fail clearly when it never does."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {within} s: {what or check}")
