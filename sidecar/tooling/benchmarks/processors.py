"""The benchmarks' stand-in processors (noop.py, lower_bound.py) started the same way."""

from __future__ import annotations

import sys
from pathlib import Path

from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess


def split_option(flags: list[str], name: str, default: str) -> tuple[list[str], str]:
    """A variant's serve flags without the bench's own option `name`, and its value."""
    if name not in flags:
        return flags, default
    at = flags.index(name)
    return flags[:at] + flags[at + 2 :], flags[at + 1]


def split_environment(flags: list[str]) -> tuple[list[str], dict[str, str]]:
    """A variant's serve flags without the bench's `--env NAME=VALUE` options (each one
    variable of its environment: OTEL_* for tracing, say), and those variables."""
    kept: list[str] = []
    environment: dict[str, str] = {}
    pending = iter(flags)
    for flag in pending:
        if flag == "--env":
            name, _, value = next(pending, "").partition("=")
            environment[name] = value
        else:
            kept.append(flag)
    return kept, environment


def start_processor(
    work_dir: Path, name: str, module: str, *flags: str, python: str = sys.executable
) -> tuple[str, ManagedProcess]:
    """`python -m module --port P *flags` on a free port, serving gRPC when it returns
    (stopped again if it never does); `python`: another interpreter's install."""
    address = f"127.0.0.1:{free_port()}"
    process = ManagedProcess(
        name,
        [python, *(["-P"] if python != sys.executable else []), "-m", module,
         "--port", address.rsplit(":", 1)[1], *flags],
        work_dir / f"{name}.log",
    )  # fmt: skip
    process.start_ready(lambda: readiness.grpc_serving(address))
    return address, process
