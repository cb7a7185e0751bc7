"""Fair shares inside a tier: one P1 tenant floods, three others ask 10 % of the tier each.

A local stack (one fast mock GPU, the sidecar, Envoy), P1's rate 7 000 tokens a second.
Tenant A offers 10 times the tier's rate in 1 000-token prompts; B, C and D each 10 % of
it in 100-token prompts, all on open schedules. Run once with fairness on and once with
`fairness.enabled: false` (every tenant drawing from the one tier bucket, as before),
after a baseline of B, C and D alone; then B (weight 3) and C (weight 1) both flooding.
Prints what each tenant got: requests served, median latency, tokens a second.

Run: .venv/bin/python bench/fairness.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from sidecar.tooling.benchmarks.tenant_load import (
    Answer,
    TenantLoad,
    chat,
    median_latency,
    of,
    offer,
    served_share,
    tokens_served_between,
)
from sidecar.tooling.stack.stack import Stack, StackOptions

CAPACITY = 20_000.0
RATE = CAPACITY * 0.35  # P1's
SKIP = 2.0  # seconds of each run left out of the rates: the tier's first burst
FLOOD, LIGHT = chat(1_000), chat(100)


def loads(url: str, flood: bool) -> list[TenantLoad]:
    light = [TenantLoad(t, f"bench-{t}", url, 0.10 * RATE, LIGHT) for t in "bcd"]
    return ([TenantLoad("a", "bench-a", url, 10 * RATE, FLOOD)] if flood else []) + light


def rows(name: str, answers: list[Answer], seconds: float) -> list[str]:
    printed = []
    for tenant in sorted({a.tenant for a in answers}):
        mine = of(answers, tenant)
        latency = median_latency(mine)
        rate = tokens_served_between(mine, SKIP, seconds) / (seconds - SKIP)
        printed.append(
            f"| {name} | {tenant.upper()} | {len(mine)} | {served_share(mine):.1%} | "
            f"{'-' if latency is None else f'{latency * 1000:.0f} ms'} | {rate:,.0f} | "
            f"{rate / RATE:.1%} |"
        )
    total = tokens_served_between(answers, SKIP, seconds) / (seconds - SKIP)
    printed.append(f"| {name} | all | {len(answers)} | | | {total:,.0f} | {total / RATE:.1%} |")
    return printed


def run(stack: Stack, fairness: bool, loads_: list[TenantLoad], seconds: float):
    stack.config.set(
        {
            "fleet": {"capacity_tokens_per_second": CAPACITY},
            "fairness": {"enabled": fairness, "active_seconds": 1.0},
        }
    )
    time.sleep(1.5)  # the last run's tenants go quiet, the tier's bucket refills
    return asyncio.run(offer(loads_, seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    seconds = args.seconds
    table = [
        "| run | tenant | requests | served | median latency | tokens/s | of P1's rate |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp:
        options = StackOptions.on_free_ports(
            Path(tmp),
            replicas=1,
            time_scale=0.01,
            envoy_concurrency=1,
            sidecar_args=("--log-level", "WARNING"),
        )
        with Stack(options) as stack:
            for tenant in "abcd":
                stack.config.tenant(tenant, "p1", f"bench-{tenant}")
            url = stack.envoy_url
            table += rows("B, C, D alone", run(stack, True, loads(url, False), seconds), seconds)
            for fairness in (True, False):
                name = f"A floods, fairness {'on' if fairness else 'off'}"
                table += rows(name, run(stack, fairness, loads(url, True), seconds), seconds)
            stack.config.tenant("b", "p1", "bench-b", weight=3)
            both = [TenantLoad(t, f"bench-{t}", url, 5 * RATE, FLOOD) for t in "bc"]
            for fairness in (True, False):
                name = f"B (weight 3) and C flood, fairness {'on' if fairness else 'off'}"
                table += rows(name, run(stack, fairness, both, seconds), seconds)
    print(
        f"P1's rate {RATE:,.0f} tokens/s; {seconds:g} s a run, rates over its last "
        f"{seconds - SKIP:g} s\n"
    )
    print("\n".join(table))


if __name__ == "__main__":
    main()
