"""The local stack (Redis, the sidecar, Envoy) in front of the session's real engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sidecar.tooling.engine import vllm
from sidecar.tooling.stack.stack import RunningEngines, Stack, StackOptions
from tests.engine.engine_client import Engine

LOAD_SOURCES = ("push", "scrape")


@contextmanager
def stack_in_front(
    engine: Engine | RunningEngines,
    work_dir: Path,
    load_source: str,
    tenants: dict[str, tuple[str, str]],
    config: dict[str, Any] | None = None,
) -> Iterator[Stack]:
    """A stack whose Envoy sends to `engine` (the session's vLLM, or other servers),
    told its load by a reporter (push) or by reading its /metrics (scrape), with these
    tenants (`name: (tier, api key)`) and this QoS configuration."""
    engines = (
        engine
        if isinstance(engine, RunningEngines)
        else RunningEngines((engine.url,), engine.settings.scheduling_policy)
    )
    options = StackOptions.on_free_ports(
        work_dir,
        engines=engines,
        replicas=1,
        load_source=load_source,
        envoy_concurrency=1,
        report_interval=vllm.STACK_REPORT_INTERVAL,
        sidecar_args=vllm.STACK_SIDECAR_ARGS,
    )
    with Stack(options) as stack:
        config = config or {}
        # The stack keeps reports for a few intervals; a test's `overload` adds to that.
        overload = {**options.base_config()["overload"], **config.get("overload", {})}
        stack.config.set({**config, "overload": overload})
        for name, (tier, key) in tenants.items():
            stack.config.tenant(name, tier, key)
        yield stack
