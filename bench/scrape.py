"""What scrape mode costs the scraping sidecar: 50 pods scraped every 200 ms.

Starts a redis-server, one process serving a real-shaped vLLM 0.33 exposition
(tests/fixtures/metrics/vllm-0.33-dp2.prom) on `--targets` loopback ports, and two
sidecars side by side on the same Redis: one scraping every port every `--interval`,
one with nothing to scrape (the baseline). Measures both processes' CPU time over
`--rounds` windows of `--seconds` and prints each as a share of one core, and the
scraping's own cost (the difference).

Run: .venv/bin/python bench/scrape.py [--targets 50] [--interval 0.2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess, cpu_seconds
from sidecar.tooling.stack.redis_servers import redis_on_free_port
from sidecar.tooling.stack.stack import start_sidecar

FIXTURE = Path(__file__).resolve().parents[1] / "tests/fixtures/metrics/vllm-0.33-dp2.prom"


def samples(admin_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp:
        work = Path(tmp)
        started: list[ManagedProcess] = []
        try:
            redis_process, redis_url = redis_on_free_port(work)
            started.append(redis_process)
            ports = [free_port() for _ in range(args.targets)]
            pods = ManagedProcess(
                "pods",
                [sys.executable, "-m", "sidecar.tooling.benchmarks.metrics_pods",
                 "--file", str(FIXTURE), "--ports", ",".join(map(str, ports))],
                work / "pods.log",
            )  # fmt: skip
            started.append(
                pods.start_ready(lambda: readiness.http_ok(f"http://127.0.0.1:{ports[-1]}/health"))
            )
            targets = ",".join(f"127.0.0.1:{p}" for p in ports)
            scraping = start_sidecar(
                work, redis_url, "--log-level", "WARNING", "--scrape-targets", targets,
                "--scrape-interval", str(args.interval), name="scraping",
            )  # fmt: skip
            started.append(scraping.process)
            idle = start_sidecar(work, redis_url, "--log-level", "WARNING", name="idle")
            started.append(idle.process)
            deadline = time.monotonic() + 30
            while samples(scraping.admin_url).get("qos_pods_reporting", 0) < args.targets:
                assert time.monotonic() < deadline, "the pods were never all scraped"
                time.sleep(0.2)
            shares: dict[str, list[float]] = {"scraping": [], "idle": []}
            for _ in range(args.rounds):
                pids = {"scraping": scraping.process.pid, "idle": idle.process.pid}
                before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                began = time.monotonic()
                time.sleep(args.seconds)
                elapsed = time.monotonic() - began
                for name, pid in pids.items():
                    shares[name].append((cpu_seconds(pid) - before[name]) / elapsed)
            figures = samples(scraping.admin_url)
        finally:
            for process in reversed(started):
                process.stop()
    size = FIXTURE.stat().st_size
    print(
        f"{args.targets} pods scraped every {args.interval * 1000:.0f} ms "
        f"({size:,}-byte vLLM 0.33 exposition each), {args.rounds} windows of "
        f"{args.seconds:g} s\n"
    )
    print("| sidecar | CPU, share of one core (median) | windows |")
    print("|---|---:|---|")
    for name, values in shares.items():
        listed = ", ".join(f"{v:.1%}" for v in values)
        print(f"| {name} | {statistics.median(values):.1%} | {listed} |")
    cost = statistics.median(s - i for s, i in zip(shares["scraping"], shares["idle"], strict=True))
    print(f"| scraping's own cost (difference) | {cost:.1%} | |")
    print(
        f"\npods reporting at the end: {figures.get('qos_pods_reporting', 0):.0f}; "
        f"failed scrapes: {figures.get('qos_scrape_errors_total', 0):.0f}"
    )


if __name__ == "__main__":
    main()
