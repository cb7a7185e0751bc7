"""The local stack (Redis, the sidecar, Envoy) in front of the session's real engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sidecar.tooling.stack.stack import RunningEngines, Stack, StackOptions
from tests.engine.engine_client import Engine

LOAD_SOURCES = ("push", "scrape")


@contextmanager
def stack_in_front(
    engine: Engine,
    work_dir: Path,
    load_source: str,
    tenants: dict[str, tuple[str, str]],
    config: dict[str, Any] | None = None,
) -> Iterator[Stack]:
    """A stack whose Envoy sends to `engine`, told its load by a reporter (push) or by
    reading its /metrics (scrape), with these tenants (`name: (tier, api key)`) and this
    QoS configuration."""
    engines = RunningEngines((engine.url,), engine.settings.scheduling_policy)
    options = StackOptions.on_free_ports(
        work_dir,
        engines=engines,
        replicas=1,
        load_source=load_source,
        envoy_concurrency=1,
        # vLLM's /metrics answers in ~20 ms idle, but takes up to a second or two while
        # its API server streams on these two cores: a report (or scrape, given 0.8 s)
        # every second, kept for five.
        report_interval=1.0,
        # vLLM takes most of both cores while it decodes: a Redis call may pass 250 ms,
        # and a report not stored would leave the load unknown. (Decisions keep their
        # 10 ms: one waiting longer than Envoy's 250 ms message timeout is sent on
        # undecided.)
        sidecar_args=("--redis-socket-timeout-ms", "2000"),
    )
    with Stack(options) as stack:
        config = config or {}
        # The stack keeps reports for a few intervals; a test's `overload` adds to that.
        overload = {**options.base_config()["overload"], **config.get("overload", {})}
        stack.config.set({**config, "overload": overload})
        for name, (tier, key) in tenants.items():
            stack.config.tenant(name, tier, key)
        yield stack
