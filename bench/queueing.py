"""Queue waits per tier at 2.5x overload: how long admitted requests waited for a slot.

A local stack (two mock GPUs, reporters, the sidecar, Envoy) with a fleet limit of
`--slots` requests in flight. Open-loop Poisson arrivals offer 2.5 times what the slots
can serve (each answer streams `--tokens` tokens), mixed 20 % P0, 40 % P1, 40 % P2.
Each admitted request's queue wait comes back through the mock, which echoes the
`x-qos-queue-wait-ms` header the sidecar set upstream.

Run: .venv/bin/python bench/queueing.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import aiohttp

from sidecar.tooling.stack.stack import Stack, StackOptions

MIX = (("p0", 0.2), ("p1", 0.4), ("p2", 0.4))
DECODE_MS = 2.5  # the mocks' decode step


async def one(session, url, tier, tokens, waits, outcomes, latencies) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
    }
    started = time.perf_counter()
    async with session.post(
        f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer bench-{tier}"}
    ) as response:
        async for _ in response.content.iter_any():
            pass
        decision = response.headers.get("x-qos-decision")
        if decision:
            outcomes[tier][decision] += 1
            return
        waits[tier].append(float(response.headers["x-mock-saw-x-qos-queue-wait-ms"]))
        outcomes[tier]["served"] += 1
        latencies[tier].append(time.perf_counter() - started)


async def offer(url: str, rate: float, seconds: float, tokens: int):
    waits, latencies = defaultdict(list), defaultdict(list)
    outcomes: dict[str, Counter] = defaultdict(Counter)
    rng = random.Random(1)
    tasks = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            tier = rng.choices([t for t, _ in MIX], [w for _, w in MIX])[0]
            tasks.append(
                asyncio.create_task(one(session, url, tier, tokens, waits, outcomes, latencies))
            )
            await asyncio.sleep(rng.expovariate(rate))
        await asyncio.gather(*tasks)
    return waits, outcomes, latencies


def percentile(values, q):
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100)[q - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    serve_seconds = args.tokens * DECODE_MS / 1000
    capacity = args.slots / serve_seconds  # requests a second the slots can serve
    offered = 2.5 * capacity
    with tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp:
        options = StackOptions.on_free_ports(
            Path(tmp),
            replicas=2,
            time_scale=DECODE_MS / 25,
            envoy_concurrency=1,
            sidecar_args=("--log-level", "WARNING"),
        )
        with Stack(options) as stack:
            config = stack.config
            for tier, _ in MIX:
                config.tenant(f"bench-{tier}", tier, f"bench-{tier}")
            # Slots, not token budgets, are the limit here.
            config.set(
                {"fleet": {"max_concurrency": args.slots, "capacity_tokens_per_second": 1e9}}
            )
            waits, outcomes, latencies = asyncio.run(
                offer(stack.envoy_url, offered, args.seconds, args.tokens)
            )
    print(
        f"{args.slots} slots, {args.tokens}-token answers at {DECODE_MS} ms/token: capacity "
        f"{capacity:.1f} req/s; offered {offered:.1f} req/s (2.5x) for {args.seconds:.0f} s\n"
    )
    print(
        f"{'tier':<5} {'offered':>8} {'served':>7} {'shed':>6}  {'queue wait p50':>15} "
        f"{'p99':>8}  {'latency p50':>12} {'p99':>8}  shed reasons"
    )
    for tier, _ in MIX:
        counts = outcomes[tier]
        shed = sum(n for reason, n in counts.items() if reason != "served")
        reasons = ", ".join(f"{r} {n}" for r, n in counts.most_common() if r != "served")
        print(
            f"{tier:<5} {sum(counts.values()):>8} {counts['served']:>7} {shed:>6}  "
            f"{percentile(waits[tier], 50):>12.0f} ms {percentile(waits[tier], 99):>5.0f} ms"
            f"  {percentile(latencies[tier], 50):>10.2f} s"
            f" {percentile(latencies[tier], 99):>6.2f} s"
            f"  {reasons}"
        )


if __name__ == "__main__":
    main()
