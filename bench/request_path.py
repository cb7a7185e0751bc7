"""How much of the code one admitted chat completion runs through: a trace of its decision.

Starts a redis-server on a free loopback port and `qos-sidecar serve` in this process
(the real queue, over-limit cache and resilient limiter), adds a P1 tenant, and sends
chat completions over real gRPC the way Envoy does (headers, then the buffered body).
After a warm-up (connections, caches, the script loaded), one request's ext_proc stream
is traced with sys.setprofile, counting only what runs in the task that serves that
stream (the background loops run beside it and are not counted). Counted: the
project's own modules; the Redis client plumbing (`sidecar.redis_*`), the metrics
module and generated code are left out, as are libraries and the Lua run inside Redis.

Printed: the modules entered, the distinct functions, the calls (a coroutine resumed
after an await is not a new call) and the moves between files (a call from a function
of one file into one of another), then the modules, each with its calls.

Run: .venv/bin/python bench/request_path.py [--functions] [--json FILE]
(another checkout's code: its venv's python -P bench/request_path.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
import redis.asyncio as aioredis

import sidecar
from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.ports import free_port
from sidecar.server import SidecarServer
from sidecar.settings import SidecarSettings
from sidecar.tooling.extproc_client import ExtProcClient, admitted
from sidecar.tooling.stack.redis_servers import start_redis_server

# The package as imported: run with another venv's interpreter (`-P`), another
# checkout's code is traced.
SIDECAR = Path(sidecar.__file__).resolve().parent
LEFT_OUT = ("sidecar.generated", "sidecar.redis_", "sidecar.metrics")
BODY = {"model": "m", "messages": [{"role": "user", "content": "Where is my order? " * 20}]}
API_KEY = "trace-key"


def module_name(filename: str) -> str | None:
    """The project module a file is, or None when it is not one that counts."""
    path = Path(filename)
    if not path.is_relative_to(SIDECAR) or path.suffix != ".py":
        return None
    parts = path.relative_to(SIDECAR.parent).with_suffix("").parts
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return None if name.startswith(LEFT_OUT) else name


@dataclass
class Trace:
    """The project's calls made in one asyncio task."""

    earlier: set[asyncio.Task[Any]]  # tasks before the trace: the warm-up's among them
    task: asyncio.Task[Any] | None = None
    seen: dict[int, FrameType] = field(default_factory=dict)  # frames kept: ids stay theirs
    calls: Counter[str] = field(default_factory=Counter)  # per module
    functions: set[tuple[str, str, int]] = field(default_factory=set)
    moves: int = 0
    move_pairs: Counter[str] = field(default_factory=Counter)  # caller -> callee

    def profile(self, frame: FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        code = frame.f_code
        module = module_name(code.co_filename)
        if module is None:
            return
        if self.task is None:
            task = asyncio.current_task()
            # The servicer's handler of a stream opened after the trace began starts it.
            if code.co_name != "Process" or task in self.earlier:
                return
            self.task = task
        elif asyncio.current_task() is not self.task:
            return
        if id(frame) in self.seen:
            return  # a coroutine resumed, not called
        self.seen[id(frame)] = frame
        self.calls[module] += 1
        self.functions.add((module, code.co_qualname, code.co_firstlineno))
        caller = frame.f_back
        caller_module = module_name(caller.f_code.co_filename) if caller is not None else None
        if caller_module is not None and caller_module != module:
            self.moves += 1
            assert caller is not None
            self.move_pairs[f"{caller.f_code.co_qualname} -> {code.co_qualname}"] += 1

    def summary(self) -> dict[str, Any]:
        return {
            "modules": len(self.calls),
            "functions": len(self.functions),
            "calls": sum(self.calls.values()),
            "moves_between_files": self.moves,
            "calls_per_module": dict(sorted(self.calls.items())),
            "moves": dict(sorted(self.move_pairs.items())),
            "functions_per_module": {
                module: sorted(name for of, name, _ in self.functions if of == module)
                for module in sorted(self.calls)
            },
        }


async def traced_decision(redis_url: str, work: Path) -> dict[str, Any]:
    client = aioredis.Redis.from_url(redis_url)
    store = ConfigStore(client)
    # Budgets far above one request: it takes the admit path.
    await store.save_config(QosConfig.from_partial({"fleet": {"max_concurrency": 64}}))
    await store.put_tenant("trace", Tenant(tier=Tier.P1), API_KEY)
    await client.aclose()
    settings = SidecarSettings(
        redis_url=redis_url,
        grpc_port=free_port(),
        admin_port=free_port(),
        admin_token="trace",
        log_level="WARNING",
    )
    server = SidecarServer(settings)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(settings.grpc_address) as channel:
            extproc = ExtProcClient(channel)
            for _ in range(50):  # warm-up: connections, the key's cache, the script
                if not admitted(await extproc.decide(BODY, api_key=API_KEY)):
                    raise SystemExit("the warm-up request was not admitted")
            trace = Trace(asyncio.all_tasks())
            sys.setprofile(trace.profile)
            try:
                answer = await extproc.decide(BODY, api_key=API_KEY)
            finally:
                sys.setprofile(None)
            if not admitted(answer):
                raise SystemExit("the traced request was not admitted")
    finally:
        await server.stop()
    return trace.summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the counts here too")
    parser.add_argument("--functions", action="store_true", help="name each module's functions")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qos-trace-") as tmp:
        work = Path(tmp)
        port = free_port()
        redis_process = start_redis_server(work, port)
        try:
            summary = asyncio.run(traced_decision(f"redis://127.0.0.1:{port}/0", work))
        finally:
            redis_process.stop()
    print(
        f"one admitted chat completion: {summary['modules']} modules, "
        f"{summary['functions']} functions, {summary['calls']} calls, "
        f"{summary['moves_between_files']} moves between files"
    )
    for module, calls in summary["calls_per_module"].items():
        print(f"  {calls:4d}  {module}")
        if args.functions:
            print("          " + ", ".join(summary["functions_per_module"][module]))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
