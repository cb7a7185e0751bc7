"""What fair shares add to the one budget call: token_bucket.lua with and without them.

Starts a redis-server on a free loopback port and takes budget from a tier's bucket the
way the sidecar does (EVALSHA, one call a decision), in alternating rounds with and
without the fair-share group, `--tenants` tenants asking in turn. Reports Redis's own
time per call (INFO commandstats) and the client's round trip, and their ratios.

Run: .venv/bin/python bench/fair_lua.py [--calls 20000] [--tenants 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import redis.asyncio as aioredis

from sidecar.budget_layout import fair_share_keys, tier_bucket_key
from sidecar.ports import free_port
from sidecar.request.limiter.buckets import BucketSpec, FairShare
from sidecar.request.limiter.redis_buckets import RedisTokenBuckets
from sidecar.tooling.stack.redis_servers import start_redis_server

RATE = 1e9  # never empty: every call admits, the path a decision takes most


def bucket(tenant: str | None) -> BucketSpec:
    fair = None
    if tenant is not None:
        state, active = fair_share_keys("p1")
        fair = FairShare(state, active, tenant, 1.0, 2.0, 5.0, RATE / 4)
    return BucketSpec(tier_bucket_key("p1"), RATE, RATE / 2, fair)


async def evalsha_stats(client: aioredis.Redis) -> tuple[int, float, int]:
    """EVALSHA calls and µs, and every command run (those inside scripts too)."""
    stats = await client.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    commands = sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")
    return int(evalsha.get("calls", 0)), float(evalsha.get("usec", 0)), commands


async def round_of(buckets: RedisTokenBuckets, client, fair: bool, calls: int, tenants: int):
    """Client seconds per call, Redis µs per call, Redis commands per call."""
    before = await evalsha_stats(client)
    started = time.perf_counter()
    for i in range(calls):
        await buckets.acquire(10, [bucket(f"t{i % tenants}" if fair else None)])
    seconds = (time.perf_counter() - started) / calls
    after = await evalsha_stats(client)
    scripts = max(1, after[0] - before[0])
    return seconds, (after[1] - before[1]) / scripts, (after[2] - before[2] - 1) / scripts


async def bench(url: str, calls: int, tenants: int, rounds: int) -> None:
    client = aioredis.Redis.from_url(url)
    buckets = RedisTokenBuckets(client)
    await buckets.warm()
    figures: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    for _ in range(rounds):
        for fair in (False, True):
            figures[fair].append(await round_of(buckets, client, fair, calls, tenants))
    await client.aclose()
    print(f"{calls} calls a round, {rounds} rounds each, {tenants} tenants asking in turn\n")
    print("| token_bucket.lua | Redis µs per call | client µs per call | commands per call |")
    print("|---|---:|---:|---:|")
    medians = {}
    for fair, rows in figures.items():
        client_us = statistics.median(r[0] for r in rows) * 1e6
        redis_us = statistics.median(r[1] for r in rows)
        commands = statistics.median(r[2] for r in rows)
        medians[fair] = (redis_us, client_us, commands)
        name = "with fair shares" if fair else "without"
        print(f"| {name} | {redis_us:.1f} | {client_us:.1f} | {commands:.2f} |")
    ratio = [medians[True][i] / medians[False][i] for i in (0, 1, 2)]
    print(f"| ratio | {ratio[0]:.2f} | {ratio[1]:.2f} | {ratio[2]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp:
        port = free_port()
        server = start_redis_server(Path(tmp), port)
        try:
            asyncio.run(bench(f"redis://127.0.0.1:{port}/0", args.calls, args.tenants, args.rounds))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
