"""Small clients for the integration tests."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> dict[str, float]:
    """Prometheus samples by `name{labels}` (labels sorted), as floats."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


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
