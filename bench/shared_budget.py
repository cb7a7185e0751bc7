"""Does one budget bind across gateways? N gateways share one Redis; every tenant's
clients spread over all of them at once; how far do the tenants get past their budgets?

Each gateway is the shipped envoy.yaml (one worker) in front of its own qos-sidecar
(`--processes 2` by default), all in front of one upstream Envoy answering a canned
completion. Tenants have a fixed token rate and a burst of one second of it; `--clients`
connections in all (closed loop, each a tenant's and a gateway's in turn) send as fast as
answers come for `--seconds`. A tenant's budget allows rate x time + burst tokens; what
the gateways admitted beyond that is its overshoot. Run twice: with admissions from a
bucket's known headroom (the default: most decisions do not wait on Redis, which is
charged behind) and with every decision asking Redis (`--charge-behind-ms 0`).

Then the same through LiteLLM's proxy (`--modes ...,litellm`; litellm_peer.py): N
proxies of `--processes` workers sharing the Redis, each tenant a key whose `tpm_limit`
is its rate. LiteLLM counts a key's tokens (prompt and answer, from the usage) in a
window of a minute from its first request, so that run lasts `--litellm-seconds` (55:
one window) and its allowance is the limit, one minute of the rate.

Run: .venv/bin/python bench/shared_budget.py [--gateways 4] [--clients 100] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from gateway import BODY, CANNED, canned_stack, gateway_config

from sidecar.ports import free_port
from sidecar.tooling.benchmarks import litellm_peer
from sidecar.tooling.benchmarks.litellm_peer import KeyLimits, PeerSetup
from sidecar.tooling.benchmarks.prompt_estimate import estimate_prompt_tokens
from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.stack import Stack, start_envoy, start_sidecar

MODES = {"headroom": [], "exact": ["--charge-behind-ms", "0"]}
BURST_SECONDS = 1.0
LITELLM = "litellm"
LITELLM_WINDOW = 60.0  # seconds: its limiter's window (LITELLM_RATE_LIMIT_WINDOW_SIZE)


@dataclass(frozen=True)
class Tenant:
    name: str
    key: str
    rate: float  # tokens a second


def configure(stack: Stack, tenants: list[Tenant]) -> None:
    """Tier budgets far above the load: only the tenants' own buckets bind."""
    stack.config.set(
        {
            "fleet": {"capacity_tokens_per_second": 1e9, "max_concurrency": 100_000},
            "tiers": {"p1": {"shed_below_free_kv": None, "shed_above_inflight": None}},
            "controller": {"enabled": False},
            "fairness": {"enabled": False},
        }
    )
    for tenant in tenants:
        stack.config.tenant(
            tenant.name,
            "p1",
            tenant.key,
            rate_tokens_per_second=tenant.rate,
            burst_seconds=BURST_SECONDS,
        )


async def offer(
    urls: list[str], tenants: list[Tenant], clients: int, seconds: float
) -> dict[str, Counter[int]]:
    """Every client sends one request after another through its gateway for its
    tenant; per tenant, the statuses of the requests sent within the window."""
    statuses: dict[str, Counter[int]] = {t.name: Counter() for t in tenants}
    why: list[str] = []
    body = json.dumps(BODY).encode()
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as session:
        deadline = time.monotonic() + seconds

        async def client(index: int) -> None:
            tenant = tenants[index % len(tenants)]
            url = urls[(index // len(tenants)) % len(urls)]  # each tenant on every gateway
            headers = {"Authorization": f"Bearer {tenant.key}", "Content-Type": "application/json"}
            while time.monotonic() < deadline:
                async with session.post(
                    f"{url}/v1/chat/completions", data=body, headers=headers
                ) as answer:
                    said = await answer.read()
                    statuses[tenant.name][answer.status] += 1
                    if answer.status not in (200, 429) and len(why) < 3:
                        why.append(
                            f"{answer.status} {answer.headers.get('x-qos-decision')} {said[:300]!r}"
                        )

        await asyncio.gather(*(client(i) for i in range(clients)))
    for said in why:
        print("  answered:", said)
    return statuses


def run_mode(
    stack: Stack, work: Path, mode: str, args: argparse.Namespace, upstream_port: int
) -> dict[str, Any]:
    cost = estimate_prompt_tokens(BODY)
    tenants = [
        Tenant(f"{mode}-{i}", f"sk-{mode}-{i}", args.tenant_rps * cost) for i in range(args.tenants)
    ]
    configure(stack, tenants)
    urls, admins = [], []
    for index in range(args.gateways):
        sidecar = start_sidecar(
            work, stack.redis_url, "--log-level", "WARNING", "--processes", str(args.processes),
            *MODES[mode], name=f"sidecar-{mode}-{index}", env=stack.envoy_env,
        )  # fmt: skip
        stack.processes.append(sidecar.process)
        admins.append(sidecar.admin_url)
        port, admin_port = free_port(), free_port()
        grpc_port = int(sidecar.grpc_address.rsplit(":", 1)[1])
        config = gateway_config(port, admin_port, [grpc_port], upstream_port)
        envoy = start_envoy(
            config, work, admin_port, name=f"envoy-{mode}-{index}", concurrency=1,
            env=stack.envoy_env,
        )  # fmt: skip
        stack.processes.append(envoy)
        urls.append(f"http://127.0.0.1:{port}")
    print(f"[{mode}] {args.gateways} gateways, {args.clients} clients, {args.seconds:g} s ...")
    started = time.monotonic()
    statuses = asyncio.run(offer(urls, tenants, args.clients, args.seconds))
    window = time.monotonic() - started  # the last answers come a little after the window
    allowed = args.tenant_rps * cost * (window + BURST_SECONDS)
    # Decisions a sidecar made on its share alone, Redis having missed its deadline.
    switches = sum(
        value
        for admin in admins
        for key, value in scrape(f"{admin}/metrics").items()
        if key.startswith("qos_budget_mode_switches_total")
    )
    for process in stack.processes[-2 * args.gateways :]:
        process.stop()
    return tally(tenants, statuses, cost, allowed, window) | {"local_switches": switches}


def run_litellm(
    stack: Stack, work: Path, args: argparse.Namespace, upstream_port: int
) -> dict[str, Any]:
    """The same tenants and clients through LiteLLM's proxies, sharing the Redis."""
    cost = CANNED["usage"]["total_tokens"]  # what LiteLLM counts of each answer
    tenants = [
        Tenant(f"litellm-{i}", f"sk-litellm-{i}", args.tenant_rps * cost)
        for i in range(args.tenants)
    ]
    per_minute = [int(t.rate * LITELLM_WINDOW) for t in tenants]
    keys = tuple(
        KeyLimits(t.key, t.name, "p1", limit, 10**7)
        for t, limit in zip(tenants, per_minute, strict=True)
    )
    upstream = (f"http://127.0.0.1:{upstream_port}",)
    setup = PeerSetup(
        "mock-llm", upstream, 10**12, 10**9, keys, "127.0.0.1", stack.options.redis_port, 30.0
    )
    config = setup.write(work / "litellm")
    urls = []
    for index in range(args.gateways):
        port = free_port()
        log = work / f"litellm-{index}.log"
        stack.processes.append(litellm_peer.start(config, port, log, args.processes))
        urls.append(f"http://127.0.0.1:{port}")
    seconds = args.litellm_seconds
    print(f"[{LITELLM}] {args.gateways} proxies, {args.clients} clients, {seconds:g} s ...")
    started = time.monotonic()
    statuses = asyncio.run(offer(urls, tenants, args.clients, seconds))
    window = time.monotonic() - started
    windows = -(-window // LITELLM_WINDOW)  # each a key's whole limit again
    for process in stack.processes[-args.gateways :]:
        process.stop()
    result = tally(tenants, statuses, cost, per_minute[0] * windows, window)
    return result | {"local_switches": 0}


def tally(
    tenants: list[Tenant],
    statuses: dict[str, Counter[int]],
    cost: int,
    allowed: float,
    window: float,
) -> dict[str, Any]:
    """Per tenant, the tokens admitted against those allowed."""
    rows = []
    for tenant in tenants:
        admitted = statuses[tenant.name][200] * cost
        rows.append(
            {
                "tenant": tenant.name,
                "requests": sum(statuses[tenant.name].values()),
                "admitted_tokens": admitted,
                "allowed_tokens": allowed,
                "overshoot": admitted / allowed - 1,
                "other_statuses": {
                    str(s): n for s, n in statuses[tenant.name].items() if s not in (200, 429)
                },
            }
        )
    return {"window_seconds": window, "tenants": rows}


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        f"\n{args.gateways} gateways (--processes {args.processes}), {args.clients} clients, "
        f"{args.tenants} tenants of {args.tenant_rps:g} requests/s each, burst "
        f"{BURST_SECONDS:g} s"
    )
    print(
        "| decisions | requests/s offered | admitted / allowed, all tenants "
        "| overshoot: mean | worst tenant | other answers | switches to local budgets |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, found in results.items():
        rows = found["tenants"]
        requests = sum(r["requests"] for r in rows) / found["window_seconds"]
        admitted = sum(r["admitted_tokens"] for r in rows)
        allowed = sum(r["allowed_tokens"] for r in rows)
        overshoots = [r["overshoot"] for r in rows]
        other = sum(sum(r["other_statuses"].values()) for r in rows)
        print(
            f"| {mode} | {requests:,.0f} | {admitted:,.0f} / {allowed:,.0f} | "
            f"{sum(overshoots) / len(overshoots):+.1%} | {max(overshoots):+.1%} | {other} | "
            f"{found['local_switches']:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2, help="each sidecar's")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--tenant-rps", type=float, default=5.0, help="each tenant's budget")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--modes", default="headroom,exact,litellm")
    parser.add_argument(
        "--litellm-seconds", type=float, default=55.0, help="within one of its windows"
    )
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="qos-shared-") as tmp:
        work = Path(tmp)
        with canned_stack(work) as (stack, upstream_port):
            for mode in args.modes.split(","):
                if mode == LITELLM:
                    results[mode] = run_litellm(stack, work, args, upstream_port)
                else:
                    results[mode] = run_mode(stack, work, mode, args, upstream_port)
    report(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
