"""Decision time and Redis round trips of admission, side by side with admit-all.

Starts a redis-server and two sidecars on free loopback ports: one that admits
everything without looking (`--decider admit-all`, the floor) and one with the full
admission policy. Both get the same requests over real gRPC, one at a time, and the
client times each decision (body sent → answer read). Redis's INFO commandstats tells
how many commands the decision path sent per admitted request.

Run: .venv/bin/python bench/admission.py [--requests 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import redis
import redis.asyncio as aioredis

from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.config.watcher import ConfigWatcher
from sidecar.deciders import build_decider
from sidecar.ports import free_port
from sidecar.request.admission.refunds import Refunds
from sidecar.request.limiter.redis_buckets import RedisTokenBuckets
from sidecar.request.limiter.resilient import ResilientLimiter
from sidecar.request.policy.decision import Admit, RequestView
from sidecar.settings import SidecarSettings
from sidecar.tooling.extproc_client import ExtProcClient, admitted
from sidecar.tooling.stack.redis_servers import start_redis_server
from sidecar.tooling.stack.stack import start_sidecar

BODY = {"model": "m", "messages": [{"role": "user", "content": "Where is my order? " * 20}]}
DECISION_COMMANDS = ("evalsha", "eval", "script|load", "hget")


def command_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): value["calls"] for name, value in stats.items()}


async def run(
    address: str, requests: int, api_key: str, counter: redis.Redis
) -> tuple[list[float], int, dict[str, int]]:
    """Per-decision latencies (seconds), how many were admitted, Redis commands sent."""
    latencies, admits = [], 0
    async with grpc.aio.insecure_channel(address) as channel:
        client = ExtProcClient(channel)
        for _ in range(200):  # warm-up: connections, caches, script load
            await client.decide(BODY, api_key=api_key)
        before = command_calls(counter)
        for _ in range(requests):
            started = time.perf_counter()
            answer = await client.decide(BODY, api_key=api_key)
            latencies.append(time.perf_counter() - started)
            admits += admitted(answer)
        after = command_calls(counter)
    sent = {name: after[name] - before.get(name, 0) for name in after}
    return latencies, admits, {name: n for name, n in sent.items() if n}


async def decide_in_process(
    redis_url: str, requests: int, counter: redis.Redis
) -> tuple[list[float], int, dict[str, int]]:
    """The admission decider itself, timed around decide(): parse, identify, one Redis call.
    No background work runs here but the config poll, so Redis's command counts are the
    decision path's own."""
    client = aioredis.Redis.from_url(redis_url)
    watcher = ConfigWatcher(client)
    await watcher.start()
    # The budgets as `serve` keeps them: shared in Redis, local should it be lost.
    limiter = ResilientLimiter(RedisTokenBuckets(client), client, lambda: 1)
    settings = SidecarSettings(redis_url=redis_url)
    decider = build_decider(settings, client, watcher, limiter, Refunds(limiter))
    headers = {
        ":method": "POST",
        ":path": "/v1/chat/completions",
        "authorization": "Bearer bench-key",
    }
    view = RequestView("POST", "/v1/chat/completions", headers, json.dumps(BODY).encode())
    latencies, admits = [], 0
    try:
        for _ in range(200):  # warm-up: connection, script load, key cache
            await decider.decide(view)
        before = command_calls(counter)
        for _ in range(requests):
            started = time.perf_counter()
            decision = await decider.decide(view)
            latencies.append(time.perf_counter() - started)
            admits += isinstance(decision, Admit)
        after = command_calls(counter)
    finally:
        await watcher.stop()
        await client.aclose()
    sent = {name: after[name] - before.get(name, 0) for name in after}
    return latencies, admits, {name: n for name, n in sent.items() if n}


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 10) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp:
        work = Path(tmp)
        port = free_port()
        redis_process = start_redis_server(work, port)
        redis_url = f"redis://127.0.0.1:{port}/0"
        processes = [redis_process]
        try:
            client = redis.Redis.from_url(redis_url)

            async def configure(partial: dict) -> None:
                async_client = aioredis.Redis.from_url(redis_url)
                store = ConfigStore(async_client)
                await store.save_config(QosConfig.from_partial(partial))
                await store.put_tenant("bench", Tenant(tier=Tier.P1), "bench-key")
                await async_client.aclose()

            # Budget far above the offered load: every request takes the admit path.
            asyncio.run(configure({"fleet": {"capacity_tokens_per_second": 1e9}}))
            # First, with no sidecar process running: Redis sees the decision path alone.
            in_process, in_process_admits, in_process_sent = asyncio.run(
                decide_in_process(redis_url, args.requests, client)
            )
            results = {}
            for decider in ("admit-all", "admission"):
                sidecar = start_sidecar(
                    work,
                    redis_url,
                    "--decider",
                    decider,
                    "--log-level",
                    "WARNING",
                    name=f"sidecar-{decider}",
                )
                processes.append(sidecar.process)
                address = sidecar.grpc_address
                latencies, admits, sent = asyncio.run(
                    run(address, args.requests, "bench-key", client)
                )
                results[decider] = (latencies, admits, sent)
            # The shed path: P1's budget holds three requests and refills 0.35 tokens/s.
            asyncio.run(
                configure(
                    {
                        "fleet": {"capacity_tokens_per_second": 1},
                        "tiers": {"p1": {"burst_seconds": 1000}},
                    }
                )
            )
            shed_latencies, shed_admits, shed_sent = asyncio.run(
                run(address, args.requests, "bench-key", client)
            )
        finally:
            for process in reversed(processes):
                process.stop()

    floor = results["admit-all"][0]
    trips = sum(in_process_sent.get(c, 0) for c in DECISION_COMMANDS)
    print(
        f"decide() alone, in process, real Redis: p50 {percentile(in_process, 50) * 1000:.3f} ms"
        f", p99 {percentile(in_process, 99) * 1000:.3f} ms; {in_process_admits} admitted with "
        f"{trips} Redis round trips ({trips / in_process_admits:.3f} per admitted request)"
    )
    print(f"  Redis commands counted: {in_process_sent}")
    print(
        "  (round trips: EVALSHA, EVAL, SCRIPT LOAD and HGET for API keys; TIME, HMGET, HSET\n"
        "  and PEXPIRE run inside the one script; GET is the config poll)\n"
    )
    print(f"{args.requests} decisions each, one at a time, over real gRPC on loopback\n")
    header = ("decider", "p50 ms", "p99 ms", "p50 vs floor")
    print(f"{header[0]:<22} {header[1]:>8} {header[2]:>8} {header[3]:>13}")
    rows = [(name, *results[name]) for name in ("admit-all", "admission")]
    rows.append(("admission, shed path", shed_latencies, shed_admits, shed_sent))
    for name, latencies, admits, _sent in rows:
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        ratio = p50 / percentile(floor, 50)
        print(
            f"{name:<22} {p50 * 1000:>8.3f} {p99 * 1000:>8.3f} {ratio:>12.2f}x"
            f"   admitted {admits}/{len(latencies)}"
        )


if __name__ == "__main__":
    main()
