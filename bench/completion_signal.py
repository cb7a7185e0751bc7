"""How should the sidecar learn that an exchange has ended? Each way, side by side.

The sidecar must give a request's slot back when its HTTP exchange ends, which for a
streamed answer is long after the response headers (where Envoy closes the ext_proc
stream when response bodies are not sent). The candidates, each run against the same
mock GPU streaming the same answers, one after another in one run:

  baseline            ext_proc, response body NONE, no end signal (what is lost: the end)
  access log          + Envoy's gRPC access-log stream (one entry per exchange, async)
  body STREAMED       ext_proc response body STREAMED: every chunk through the sidecar,
                      Envoy waiting for its answer before passing the chunk on
  observability       + a second ext_proc filter in observability mode, response body
                      STREAMED: every chunk sent to the sidecar, Envoy not waiting

Reported per variant: added time per streamed token against the baseline (the client's
view: total stream time / tokens), p99 gap between tokens, and the sidecar's CPU per
1,000 tokens. Run: .venv/bin/python bench/completion_signal.py [--requests 30]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from sidecar.tooling.stack import envoy_config
from sidecar.tooling.stack.processes import cpu_seconds
from sidecar.tooling.stack.stack import Stack, StackOptions

TOKENS = 200
CONCURRENCY = 8


def _filters(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    manager = envoy_config.connection_manager(config)
    ext_proc = next(f for f in manager["http_filters"] if f["name"].endswith("ext_proc"))
    return manager, ext_proc


def variant(name: str) -> dict[str, Any]:
    config = envoy_config.load()
    manager, ext_proc = _filters(config)
    if name != "access log":
        del manager["access_log"]
    if name == "body STREAMED":
        ext_proc["typed_config"]["processing_mode"]["response_body_mode"] = "STREAMED"
    if name == "observability":
        observer = copy.deepcopy(ext_proc)
        observer["name"] = "qos_observer"
        observer["typed_config"]["observability_mode"] = True
        observer["typed_config"]["processing_mode"]["response_body_mode"] = "STREAMED"
        filters = manager["http_filters"]
        filters.insert(filters.index(ext_proc) + 1, observer)
    return config


VARIANTS = ("baseline", "access log", "body STREAMED", "observability")


async def stream_once(session: aiohttp.ClientSession, url: str) -> list[float]:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "stream": True,
    }
    times = []
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        async for line in response.content:
            if line.startswith(b"data: {"):
                times.append(time.perf_counter())
    return times


async def measure(stack: Stack, requests: int) -> dict[str, float]:
    sidecar_pid = stack.process("sidecar").pid
    async with aiohttp.ClientSession() as session:
        await stream_once(session, stack.envoy_url)  # warm-up
        cpu_before = cpu_seconds(sidecar_pid)
        sequential = [await stream_once(session, stack.envoy_url) for _ in range(requests)]
        rounds = max(1, requests // CONCURRENCY)
        concurrent = []
        for _ in range(rounds):
            concurrent += await asyncio.gather(
                *(stream_once(session, stack.envoy_url) for _ in range(CONCURRENCY))
            )
        cpu = cpu_seconds(sidecar_pid) - cpu_before
    streams = sequential + concurrent
    tokens = sum(len(s) for s in streams)
    gaps = [b - a for s in streams for a, b in itertools.pairwise(s)]
    return {
        "per_token_ms": statistics.fmean((s[-1] - s[0]) / (len(s) - 1) for s in sequential) * 1000,
        "gap_p99_ms": statistics.quantiles(gaps, n=100)[98] * 1000,
        "cpu_ms_per_1k_tokens": cpu / tokens * 1000 * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp:
        for name in VARIANTS:
            work = Path(tmp) / name.replace(" ", "-")
            work.mkdir()
            path = envoy_config.write(variant(name), work / "variant.yaml")
            options = StackOptions.on_free_ports(
                work,
                replicas=1,
                envoy_config=path,
                envoy_concurrency=1,
                sidecar_args=("--decider", "admit-all", "--log-level", "WARNING"),
                mock_args=("--decode-step-ms", "1"),
            )
            with Stack(options) as stack:
                results[name] = asyncio.run(measure(stack, args.requests))
    base = results["baseline"]["per_token_ms"]
    print(
        f"{TOKENS}-token streams, 1 ms per token from the mock GPU; {args.requests} one at "
        f"a time, then {CONCURRENCY} at a time\n"
    )
    print(
        f"{'variant':<16} {'ms/token':>9} {'added ms/token':>15} {'gap p99 ms':>11} "
        f"{'sidecar CPU ms/1k tokens':>25}"
    )
    for name, figures in results.items():
        added = figures["per_token_ms"] - base
        print(
            f"{name:<16} {figures['per_token_ms']:>9.3f} {added:>+15.3f} "
            f"{figures['gap_p99_ms']:>11.3f} {figures['cpu_ms_per_1k_tokens']:>25.1f}"
        )


if __name__ == "__main__":
    main()
