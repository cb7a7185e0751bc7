"""Small clients for the integration tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sidecar.stack.admin_client import scrape, sidecar_config_version
from sidecar.stack.stack import Stack, StackOptions

__all__ = [
    "decision_count",
    "scrape",
    "sidecar_config_version",
    "stack_with_tenant",
    "wait_until",
]


@contextmanager
def stack_with_tenant(
    work_dir: Path, tenant: str, tier: str, key: str, **options: object
) -> Iterator[Stack]:
    """A fast local stack (two mock GPUs at 20x speed) with one tenant and its key."""
    options = StackOptions.on_free_ports(work_dir, time_scale=0.05, envoy_concurrency=1, **options)
    with Stack(options) as stack:
        stack.config.tenant(tenant, tier, key)
        yield stack


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
