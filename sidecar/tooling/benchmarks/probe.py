"""A gRPC round-trip probe: one request decision at a time to an ext_proc server, every
100 ms, for a while; prints its latencies' p50 and p99 as JSON.

Run in a process of its own beside a load test, it shows how long a processor takes to
answer when the machine is busy, whatever the load generator's own delays.

Run: .venv/bin/python -m sidecar.tooling.benchmarks.probe 127.0.0.1:50051 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import grpc

from sidecar import envoy_auth
from sidecar.tooling.benchmarks.report import percentile
from sidecar.tooling.extproc_client import ExtProcClient

# A P2 batch request as the flash sale sends them (2 000 prompt tokens).
BODY = {"model": "mock-llm", "messages": [{"role": "user", "content": "buy " * 1996}]}


async def probe(address: str, seconds: float, api_key: str) -> dict[str, float | None]:
    latencies = []
    async with grpc.aio.insecure_channel(address) as channel:
        # The sidecar's Envoy token, when it asks for one (the stack passes it on).
        client = ExtProcClient(channel, os.environ.get(envoy_auth.ENV, ""))
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            await client.decide(BODY, api_key=api_key)
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.1)
    return {
        "probes": len(latencies),
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("address")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--api-key", default="probe")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(probe(args.address, args.seconds, args.api_key))))
