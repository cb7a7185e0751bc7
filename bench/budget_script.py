"""The budget call as Redis runs it: the decision's script against the lower bound's.

Every admission waits for one EVALSHA of the token-bucket script (token_bucket.lua with
what it includes); Redis runs it while the decision waits. Here a redis-server on a free
loopback port runs, in turn:

  qos-sidecar      a P1 request as the sidecar sends it: the tier's bucket, its fair
                   shares (one tenant) and the admission recorded for its pool's load
  no fair shares   the same without the fair shares
  no record        the same without the admission record
  level only       the tier's bucket alone
  bound            the lower bound's script (sidecar/tooling/benchmarks/lower_bound.py)

back to back, then one call every 15 ms (as when the gateways of bench/long_prompts.py
take turns one request at a time: Redis idles between calls). The arguments are built by
the sidecar's own code. Each call is timed by Redis itself (SLOWLOG, microseconds of the
command alone, no round trip); printed are the p50 and p90 of each.

Run: .venv/bin/python bench/budget_script.py [--calls 300] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from sidecar.budget_layout import AdmittedLoad, fair_share_keys, tier_bucket_key
from sidecar.ports import free_port
from sidecar.request.limiter.buckets import BucketSpec, FairShare
from sidecar.request.limiter.redis_buckets import SCRIPT, _taking
from sidecar.tooling.benchmarks.lower_bound import BUCKET
from sidecar.tooling.stack.redis_servers import start_redis_server

COST = 55_004.0  # a 220 KB prompt's tokens and its answer's
RATE, BURST = 350e6, 175e6  # far above one request: every call admits
PACES = {"back to back": 0.0, "one every 15 ms": 0.015}


def calls() -> dict[str, tuple[list[str], list[Any]]]:
    """Each case's keys and arguments, as the sidecar's limiter sends them."""
    state, active = fair_share_keys("p1")
    fair = FairShare(state, active, "bench-core", 1.0, 2.0, 5.0, BURST / 2)
    load = AdmittedLoad("p1", "default", 3_438)
    key = tier_bucket_key("p1")
    with_fair = [BucketSpec(key, RATE, BURST, fair=fair)]
    bare = [BucketSpec(key, RATE, BURST)]
    return {
        "qos-sidecar": _taking(COST, with_fair, load),
        "no fair shares": _taking(COST, bare, load),
        "no record": _taking(COST, with_fair, None),
        "level only": _taking(COST, bare, None),
    }


def timed(client: redis.Redis, call, pause: float, count: int) -> list[int]:
    """Redis's own microseconds for each of `count` calls."""
    for _ in range(20):  # the script cached, the keys in place
        call()
    client.slowlog_reset()
    for _ in range(count):
        call()
        if pause:
            time.sleep(pause)
    entries = client.slowlog_get(count + 100)
    return [e["duration"] for e in entries if e["command"].startswith(b"EVALSHA")]


def run(count: int) -> dict[str, dict[str, dict[str, float]]]:
    figures: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="qos-bench-script-") as tmp:
        port = free_port()
        server = start_redis_server(Path(tmp), port)
        try:
            client = redis.Redis(port=port)
            client.config_set("slowlog-log-slower-than", 0)
            client.config_set("slowlog-max-len", count + 100)
            budget, bound = client.register_script(SCRIPT), client.register_script(BUCKET)
            cases = {
                name: (lambda k=keys, a=args: budget(keys=k, args=a))
                for name, (keys, args) in calls().items()
            }
            cases["bound"] = lambda: bound(keys=["{bound}:P1"], args=[1e9, 1e9, COST])
            for pace, pause in PACES.items():
                figures[pace] = {}
                for name, call in cases.items():
                    client.flushdb()
                    micros = timed(client, call, pause, count)
                    figures[pace][name] = {
                        "p50_us": statistics.median(micros),
                        "p90_us": statistics.quantiles(micros, n=10)[-1],
                    }
            client.close()
        finally:
            server.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="timed calls per case and pace")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures = run(args.calls)
    for pace, rows in figures.items():
        print(f"\n{pace}: Redis's time per call ({args.calls} calls each)")
        print(f"{'script':<16} {'p50 us':>8} {'p90 us':>8}")
        for name, row in rows.items():
            print(f"{name:<16} {row['p50_us']:>8.0f} {row['p90_us']:>8.0f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
