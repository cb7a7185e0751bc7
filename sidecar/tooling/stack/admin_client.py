"""Talking to a running stack from outside: its metrics, and its configuration."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from sidecar import redis_connect
from sidecar.config.audit import Actor
from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode, OperatorMode, Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.loops.slo.samples import SAMPLES_PREFIX


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


def sidecar_config_version(sidecar_admin_url: str) -> float:
    """The configuration version the sidecar runs (the oldest of its worker processes')."""
    samples = scrape(f"{sidecar_admin_url}/metrics")
    versions = [v for k, v in samples.items() if k.startswith("qos_config_version{")]
    return min(versions, default=-1.0)


class StackConfig:
    """Changes the configuration of a running stack and waits until its sidecar has it."""

    def __init__(
        self,
        redis_url: str,
        sidecar_admin_url: str,
        cluster: bool = False,
        base: dict[str, Any] | None = None,
    ) -> None:
        self._redis_url = redis_url
        self._cluster = cluster
        self._admin = sidecar_admin_url
        self._base = base or {}  # top-level keys every change keeps unless it names them

    def _run(self, change: Callable[[ConfigStore], Awaitable[int]], wait: bool = True) -> int:
        async def go() -> int:
            client = redis_connect.connect(self._redis_url, self._cluster)
            try:
                return await change(ConfigStore(client))
            finally:
                await client.aclose()

        # A thread of its own: callers may be inside a running event loop (async tests).
        with ThreadPoolExecutor(1) as pool:
            version = pool.submit(asyncio.run, go()).result()
        if not wait:
            return version
        deadline = time.monotonic() + 5
        while sidecar_config_version(self._admin) < version:
            assert time.monotonic() < deadline, f"sidecar never reached config v{version}"
            time.sleep(0.01)
        return version

    def forget_latencies(self) -> int:
        """Drop the latency samples the SLO controller steers by: a run after another
        starts from the same state as the first."""

        async def drop(store: ConfigStore) -> int:
            async for key in store.client.scan_iter(match=f"{SAMPLES_PREFIX}*"):
                await store.client.delete(key)
            return await store.version()

        return self._run(drop)

    def sync(self) -> int:
        """Wait until the sidecar runs the configuration Redis holds now."""
        return self._run(lambda store: store.version())

    def set(self, partial: dict[str, Any], wait: bool = True) -> int:
        """Save the configuration; `wait=False` before the sidecar runs (it starts on it)."""
        config = QosConfig.from_partial({**self._base, **partial})
        return self._run(lambda store: store.save_config(config), wait)

    def mode(self, mode: str, by: str = "tests") -> int:
        """Switch the operator's mode (normal, core-only, shadow)."""
        switched = OperatorMode(mode=Mode(mode))
        actor = Actor(by, "cli")
        return self._run(lambda store: store.save_mode(switched, actor=actor))

    def tenant(self, name: str, tier: str, api_key: str, **fields: Any) -> int:
        tenant = Tenant(tier=Tier(tier), **fields)
        return self._run(lambda store: store.put_tenant(name, tenant, api_key))
