"""What the duty team's page costs the sidecar serving it: ten pages open at once.

Starts a redis-server holding a full ten-minute history of two pools (every field a
second of a sale has: decisions by tier and shed reason, first-token buckets, gauges) and
two sidecars side by side on it: one that ten pages poll as the page does (its history
every 2 s, its state every 1 s), one that nobody watches (the baseline). Measures both
processes' CPU time over `--rounds` windows of `--seconds`; the difference, divided by
the requests served, is the page's cost per request. Then ten clients ask for the
history back to back, as fast as it is served, to show the cost at saturation.

Run: .venv/bin/python bench/dashboard.py [--pages 10] [--seconds 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import redis

from sidecar.operator.history.store import KEPT_SECONDS, PREFIX
from sidecar.operator.history.window import SECONDS, TTFT_BUCKETS_MS
from sidecar.tooling.stack.processes import ManagedProcess, cpu_seconds
from sidecar.tooling.stack.redis_servers import redis_on_free_port
from sidecar.tooling.stack.stack import start_sidecar

TOKEN = "bench-dashboard"
POOLS = ("pool-a", "pool-b")
SHED_REASONS = ("shed_kv_watermark", "shed_inflight", "shed_tier_budget", "shed_fair_share")
CONFIG = {"pools": {"pool-a": {"models": ["a"]}, "pool-b": {"models": ["b"]}}}


def sale_second(second: int) -> dict[str, str]:
    """One second of a busy sale, every field the page charts."""
    fields = {"g|mode": "normal"}
    for pool in POOLS:
        for tier in ("p0", "p1", "p2"):
            fields[f"d|{pool}|{tier}|admit"] = str(20 + second % 7)
            for reason in SHED_REASONS:
                fields[f"d|{pool}|{tier}|{reason}"] = str(second % 5)
            for bucket in TTFT_BUCKETS_MS[:6]:
                fields[f"t|{pool}|{tier}|{bucket}"] = str(1 + second % 3)
            fields[f"g|{pool}|share|{tier}"] = "0.3333"
            fields[f"g|{pool}|shedding|{tier}"] = "shed_kv_watermark" if tier == "p2" else ""
        for gauge, value in (
            ("free_kv", "0.12"),
            ("projected_free_kv", "0.1"),
            ("in_flight", "200"),
            ("max_concurrency", "256"),
        ):
            fields[f"g|{pool}|{gauge}"] = value
    return fields  # fmt: skip


def fill_history(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    now = int(client.time()[0])
    with client.pipeline(transaction=False) as pipe:
        for second in range(now - SECONDS, now + 1):
            pipe.hset(f"{PREFIX}{second}", mapping=sale_second(second))
            pipe.expire(f"{PREFIX}{second}", KEPT_SECONDS)
        pipe.set("qos:{qos-config}:doc", json.dumps(CONFIG))
        pipe.incr("qos:{qos-config}:version")
        pipe.execute()
    client.close()


def get(url: str, compressed: bool = True) -> int:
    """The bytes of one answer, asked as a browser asks (gzip welcome) or not."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if compressed:
        headers["Accept-Encoding"] = "gzip"
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return len(response.read())


class Pages:
    """`count` open pages: each asks for the history every 2 s and the state every 1 s
    (`state=False`: the history only), or back to back (`pace=False`)."""

    def __init__(self, admin_url: str, count: int, state: bool = True, pace: bool = True) -> None:
        self.history = self.states = self.bytes = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._page, args=(admin_url, i, state, pace), daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _page(self, admin_url: str, index: int, state: bool, pace: bool) -> None:
        tick = 0
        next_at = time.monotonic() + index * 0.1  # pages opened at different moments
        while not self._stop.is_set():
            if pace:
                self._stop.wait(max(0.0, next_at - time.monotonic()))
                next_at += 1.0
            if self._stop.is_set():
                return
            if tick % 2 == 0 or not pace:
                size = get(f"{admin_url}/dashboard/api/history")
                with self._lock:
                    self.history += 1
                    self.bytes = size
            if state and pace:
                get(f"{admin_url}/dashboard/api/state")
                with self._lock:
                    self.states += 1
            tick += 1

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


def measure(watched, idle, pages: Pages, seconds: float) -> tuple[float, int, int]:
    """CPU the watched sidecar spent beyond the idle one, and the requests it served."""
    pids = (watched.process.pid, idle.process.pid)
    before = [cpu_seconds(pid) for pid in pids]
    served = (pages.history, pages.states)
    time.sleep(seconds)  # a measuring window, not a wait for a state
    after = [cpu_seconds(pid) for pid in pids]
    extra = (after[0] - before[0]) - (after[1] - before[1])
    return extra, pages.history - served[0], pages.states - served[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp:
        work = Path(tmp)
        started: list[ManagedProcess] = []
        try:
            redis_process, redis_url = redis_on_free_port(work)
            started.append(redis_process)
            fill_history(redis_url)
            common = ("--log-level", "WARNING")
            token = {"QOS_ADMIN_TOKEN": TOKEN}
            watched = start_sidecar(work, redis_url, *common, name="watched", env=token)
            idle = start_sidecar(work, redis_url, *common, name="idle", env=token)
            started += [watched.process, idle.process]
            deadline = time.monotonic() + 30
            while get(f"{watched.admin_url}/dashboard/api/history", compressed=False) < 100_000:
                assert time.monotonic() < deadline, "the window was never read"
                time.sleep(0.2)
            for name, state, pace in (
                (f"{args.pages} pages, history only (every 2 s)", False, True),
                (f"{args.pages} pages as the page polls (history 2 s, state 1 s)", True, True),
                (f"{args.pages} clients asking for the history back to back", False, False),
            ):
                pages = Pages(watched.admin_url, args.pages, state=state, pace=pace)
                try:
                    measure(watched, idle, pages, 2.0)  # warm up
                    runs = [measure(watched, idle, pages, args.seconds) for _ in range(args.rounds)]
                finally:
                    pages.stop()
                rows.append((name, runs, pages.bytes))
            raw = get(f"{watched.admin_url}/dashboard/api/history", compressed=False)
        finally:
            for process in reversed(started):
                process.stop()
    print(
        f"the page's data for two pools' full window ({raw:,} bytes of JSON, synthetic "
        f"seconds that compress better than a real sale's); {args.rounds} windows of "
        f"{args.seconds:g} s each, the watched sidecar's CPU beyond the idle one's\n"
    )
    print(
        "| pages | history requests/s | state requests/s | CPU per request (median) "
        "| share of a core | history bytes (gzip) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, runs, size in rows:
        per_request = statistics.median(cpu / max(1, h + s) for cpu, h, s in runs) * 1000
        share = statistics.median(cpu / args.seconds for cpu, _, _ in runs)
        history = statistics.median(h for _, h, _ in runs) / args.seconds
        states = statistics.median(s for _, _, s in runs) / args.seconds
        figures = f"{history:.1f} | {states:.1f} | {per_request:.2f} ms | {share:.1%} | {size:,}"
        print(f"| {name} | {figures} |")


if __name__ == "__main__":
    main()
