"""What applying a large tenants file costs the requests decided meanwhile.

Starts the local stack on free ports with `--tenants-file` and sends a steady load of P0
requests through Envoy. Each round has two windows of `--seconds`, side by side: a quiet
one, then one that opens with a new version of a file of `--tenants` tenants (each round
changes every tenant's rate, so the whole file is applied). For each window it reports
the sidecar's decision p99 (its decision log, every decision's `decided_ms`), the
requests' p99 through Envoy, and the requests that went on undecided (past Envoy's
message timeout): the ratios of the applying window's p99s to the quiet one's are the
figures.

Run: .venv/bin/python bench/tenants_file.py [--tenants 5000] [--seconds 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import aiohttp
import yaml

from sidecar.tooling.stack.stack import Stack, StackOptions

KEY = "bench-pay"
BODY = {"model": "mock-llm", "messages": [{"role": "user", "content": "pay"}], "max_tokens": 2}


def tenants_file(path: Path, count: int, rate: int) -> None:
    """`count` tenants at `rate`, and the P0 tenant the load comes from; put in place at
    once, as a mounted Secret changes."""
    tenants = {
        f"shop-{i:05d}": {
            "tier": "p1",
            "api_keys": [f"k-shop-{i:05d}"],
            "rate_tokens_per_second": rate,
        }
        for i in range(count)
    }
    document = {"tenants": {"pay": {"tier": "p0", "api_keys": [KEY]}, **tenants}}
    draft = path.with_suffix(".new")
    draft.write_text(yaml.safe_dump(document))
    draft.replace(path)


class Load:
    """`clients` clients, each one request every `pause` seconds; latencies kept by when
    they were sent."""

    def __init__(self, url: str, clients: int, pause: float) -> None:
        self.sent: list[tuple[float, float, bool]] = []  # (sent at, seconds, decided)
        self._url, self._clients, self._pause = url, clients, pause
        self._stop = asyncio.Event()

    async def run(self) -> None:
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(*(self._client(session) for _ in range(self._clients)))

    async def _client(self, session: aiohttp.ClientSession) -> None:
        headers = {"Authorization": f"Bearer {KEY}"}
        while not self._stop.is_set():
            started = time.monotonic()
            async with session.post(
                f"{self._url}/v1/chat/completions", json=BODY, headers=headers
            ) as answer:
                await answer.read()
                decided = answer.headers.get("x-mock-saw-x-qos-tier") == "p0"
            self.sent.append((started, time.monotonic() - started, decided))
            await asyncio.sleep(self._pause)

    def stop(self) -> None:
        self._stop.set()

    def between(self, start: float, end: float) -> list[tuple[float, bool]]:
        return [(seconds, decided) for at, seconds, decided in self.sent if start <= at < end]


def decisions(log: Path, start: float, end: float) -> list[float]:
    """Each decision's time (ms) in the sidecar's decision log between two wall times."""
    found = []
    for line in log.read_text().splitlines():
        if '"qos.decisions"' not in line:
            continue
        entry = json.loads(line)
        at = datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()
        if start <= at < end:
            found.append(entry["decided_ms"])
    return found


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.99 * (len(ordered) - 1))]


async def window(
    stack: Stack, load: Load, seconds: float, change: Path | None, count: int, rate: int
) -> tuple[float, float, int, int]:
    start, wall = time.monotonic(), time.time()
    if change is not None:
        await asyncio.to_thread(tenants_file, change, count, rate)
    await asyncio.sleep(seconds)  # a measuring window under load, not a wait for a state
    end, wall_end = time.monotonic(), time.time()
    await asyncio.sleep(0.5)  # the window's last decisions logged
    decided = decisions(stack.options.work_dir / "sidecar.log", wall, wall_end)
    done = load.between(start, end)
    undecided = sum(1 for _, decided in done if not decided)
    return p99(decided) / 1000, p99([s for s, _ in done]), undecided, len(done)


async def run(args: argparse.Namespace, work: Path) -> list[tuple[str, tuple]]:
    path = work / "tenants.yaml"
    tenants_file(path, args.tenants, 1000)
    options = StackOptions.on_free_ports(
        work / "stack",
        time_scale=0.02,
        envoy_concurrency=1,
        sidecar_args=("--tenants-file", str(path), "--decision-log-sample", "1"),
    )
    rows: list[tuple[str, tuple]] = []
    with Stack(options) as stack:
        load = Load(stack.envoy_url, args.clients, args.pause)
        running = asyncio.ensure_future(load.run())
        try:
            await asyncio.sleep(3)  # warm up
            for round_ in range(args.rounds):
                rows.append(("quiet", await window(stack, load, args.seconds, None, 0, 0)))
                rate = 1001 + round_
                applying = await window(stack, load, args.seconds, path, args.tenants, rate)
                rows.append((f"{args.tenants} tenants applied", applying))
        finally:
            load.stop()
            await running
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--pause", type=float, default=0.02)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp:
        rows = asyncio.run(run(args, Path(tmp)))
    print(f"\n{args.clients} clients, a request each every {args.pause * 1000:.0f} ms; "
          f"windows of {args.seconds:g} s\n")  # fmt: skip
    print("| window | requests | decision p99 | p99 through Envoy | undecided |")
    print("|---|---:|---:|---:|---:|")
    for name, (decision, through, undecided, count) in rows:
        figures = f"{decision * 1000:.2f} ms | {through * 1000:.1f} ms | {undecided}"
        print(f"| {name} | {count} | {figures} |")
    quiet = [figures for name, figures in rows if name == "quiet"]
    applying = [figures for name, figures in rows if name != "quiet"]
    for index, what in ((0, "decision p99"), (1, "p99 through Envoy")):
        ratios = [a[index] / q[index] for a, q in zip(applying, quiet, strict=True)]
        each = ", ".join(f"{r:.2f}x" for r in ratios)
        print(
            f"{what}, applying / quiet, per round: {each}; median {statistics.median(ratios):.2f}x"
        )


if __name__ == "__main__":
    main()
