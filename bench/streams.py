"""The processors without Envoy: CPU per ext_proc stream, side by side.

bench/gateway.py measures the gateway; this measures the processor alone, quieter: one
client process drives each processor over real gRPC (16 streams at once, each a POST's
headers then its buffered body, as Envoy sends them) with a real redis-server behind it,
and reads the processor's CPU time from /proc. No Envoy and no access log, so the
figures are per ext_proc stream only.

  noop      sidecar/tooling/benchmarks/noop.py: the floor of the runtime
  bound     sidecar/tooling/benchmarks/lower_bound.py: the least a policy does
  qos       qos-sidecar serve, its full policy
  NAME      qos-sidecar with the flags of --variant NAME=FLAGS; `--python PATH` runs
            another interpreter's install (and its own noop beside it)

Each round measures every processor once, starting further along the list each round.

Run: .venv/bin/python bench/streams.py [--streams 3000] [--rounds 3] [--variant NAME=FLAGS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
import redis.asyncio as redis
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.ports import free_port
from sidecar.tooling.benchmarks.processors import split_option, start_processor
from sidecar.tooling.extproc_client import http_headers
from sidecar.tooling.stack.processes import ManagedProcess, tree_cpu_seconds
from sidecar.tooling.stack.redis_servers import start_redis_server
from sidecar.tooling.stack.stack import start_sidecar

API_KEY = "bench-key"
CONCURRENCY = 16
WARM_UP_STREAMS = 300
PROMPT = "Where is my order? It was due on Monday and the tracking page shows nothing. " * 4
BODY = {"model": "mock-llm", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 1}
HEADERS = ext_proc.ProcessingRequest(
    request_headers=http_headers(
        {
            ":method": "POST",
            ":path": "/v1/chat/completions",
            "content-type": "application/json",
            "authorization": f"Bearer {API_KEY}",
        },
        False,
    )
)
REQUEST_BODY = ext_proc.ProcessingRequest(
    request_body=ext_proc.HttpBody(body=json.dumps(BODY).encode(), end_of_stream=True)
)


async def one_stream(stub: ext_proc_grpc.ExternalProcessorStub) -> ext_proc.ProcessingResponse:
    stream = stub.Process()
    await stream.write(HEADERS)
    await stream.read()
    await stream.write(REQUEST_BODY)
    answer = await stream.read()
    await stream.done_writing()
    while await stream.read() is not grpc.aio.EOF:
        pass
    return answer


async def measure(address: str, pid: int, streams: int) -> tuple[float, float]:
    """µs of the processor's CPU per stream, and streams a second."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = ext_proc_grpc.ExternalProcessorStub(channel)
        for _ in range(WARM_UP_STREAMS):
            answer = await one_stream(stub)
        if answer.WhichOneof("response") != "request_body":
            raise SystemExit(f"{address} did not admit the bench's request: {answer}")
        left = streams

        async def client() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await one_stream(stub)

        cpu, started = tree_cpu_seconds(pid), time.perf_counter()
        await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
        cpu, seconds = tree_cpu_seconds(pid) - cpu, time.perf_counter() - started
    return cpu / streams * 1e6, streams / seconds


async def configure(redis_url: str) -> None:
    """A budget far above the load, and the bench's tenant."""
    client = redis.Redis.from_url(redis_url)
    try:
        store = ConfigStore(client)
        fleet = {"capacity_tokens_per_second": 1e9, "max_concurrency": 1_000_000}
        await store.save_config(QosConfig.from_partial({"fleet": fleet}))
        await store.put_tenant("bench", Tenant(tier=Tier.P1), API_KEY)
    finally:
        await client.aclose()


def start_processors(
    work: Path, redis_url: str, variants: dict[str, list[str]], started: list[ManagedProcess]
) -> list[tuple[str, str, ManagedProcess]]:
    """noop, bound, qos and the variants, each ready; `started` gets each as it starts."""
    processors = []

    def module(name: str, python: str, path: str, *flags: str) -> None:
        address, process = start_processor(work, name, path, *flags, python=python)
        started.append(process)
        processors.append((name, address, process))

    module("noop", sys.executable, "sidecar.tooling.benchmarks.noop")
    module(
        "bound", sys.executable, "sidecar.tooling.benchmarks.lower_bound", "--redis-url", redis_url
    )
    for name, given in {"qos": [], **variants}.items():
        flags, python = split_option(given, "--python", sys.executable)
        if python != sys.executable:  # another interpreter's install: its floor beside it
            module(f"noop-{name}", python, "sidecar.tooling.benchmarks.noop")
        sidecar = start_sidecar(
            work, redis_url, "--log-level", "WARNING", *flags, name=name, python=python
        )
        started.append(sidecar.process)
        processors.append((name, sidecar.grpc_address, sidecar.process))
    return processors


def run(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="qos-streams-") as tmp:
        work = Path(tmp)
        redis_port = free_port()
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        started: list[ManagedProcess] = [start_redis_server(work, redis_port)]
        try:
            asyncio.run(configure(redis_url))
            processors = start_processors(work, redis_url, args.variants, started)
            for round_ in range(args.rounds):
                start = round_ * len(processors) // args.rounds
                for name, address, process in processors[start:] + processors[:start]:
                    cpu, rate = asyncio.run(measure(address, process.pid, args.streams))
                    results.setdefault(name, []).append((cpu, rate))
                    print(
                        f"round {round_ + 1}: {name:<12} {cpu:6.0f} µs CPU a stream,"
                        f" {rate:6.0f} streams/s",
                        flush=True,
                    )
        finally:
            for process in reversed(started):
                process.stop()
    return results


def report(results: dict[str, list[tuple[float, float]]]) -> None:
    print(f"\nmedians of {len(next(iter(results.values())))} round(s):")
    print(f"{'processor':<12} {'µs CPU/stream':>14} {'vs its noop':>12} {'streams/s':>10}")
    for name, rows in results.items():
        cpu = statistics.median(c for c, _ in rows)
        rate = statistics.median(r for _, r in rows)
        floor = f"noop-{name}" if f"noop-{name}" in results else "noop"
        floor_cpu = statistics.median(c for c, _ in results[floor])
        print(f"{name:<12} {cpu:>14.0f} {cpu / floor_cpu:>11.2f}x {rate:>10.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=3000, help="measured per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS")
    args = parser.parse_args()
    args.variants = {}
    for variant in args.variant:
        name, _, flags = variant.partition("=")
        args.variants[name] = flags.split()
    report(run(args))


if __name__ == "__main__":
    main()
