"""The gateway side by side: Envoy alone, Envoy + a do-nothing ext_proc, Envoy + qos-sidecar.

Three Envoys run at once on this machine, built from the shipped envoy.yaml, each with
one worker, all in front of the same upstream: a fourth Envoy answering every request
with a canned chat completion, so the figures are the gateway's and not a GPU stand-in's.

  alone     envoy.yaml without the ext_proc filter and the access-log stream
  noop      envoy.yaml with its ext_proc cluster pointed at sidecar/tooling/benchmarks/noop.py,
            which lets every message through: the floor of this architecture
  bound     envoy.yaml in front of sidecar/tooling/benchmarks/lower_bound.py, which does only
            what no admission policy can skip (headers, JSON, key hash, one budget
            EVALSHA, two tags, one metric): the least a policy in Python costs here
  qos       envoy.yaml in front of qos-sidecar with its full policy (Redis, identity,
            budgets, overload, queue, SLO samples; the local stack's own processes)

Measured:
  1. admit-path latency at low load: requests one at a time, taking turns between the
     three, so drift hits all alike; added latency is the difference to `alone`.
  2. shed-path latency at 2.5x overload: P2 offered at 2.5 times its budget on an open
     schedule (latency counted from each request's planned start), on `qos`.
  3. a flood: one tenant far above its own budget through one gateway at a time, to
     see what the over-limit cache spares Redis.
  4. overflow: P2's pool out of budget and a second pool with room, P2 to overflow to
     it; a P1 request admitted at home and a P2 request served by the other pool, in
     turn through `qos`: latency and Redis calls of each.
  5. maximum throughput: wrk (closed loop, fixed connections) against each in turn,
     with the CPU time each process spent and Redis's command counts, per request.

Run: .venv/bin/python bench/gateway.py [--requests 2000] [--seconds 10] [--json FILE]
(needs wrk: apt-get install wrk)
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import otlp_sink
import profiling
import redis

from sidecar.ports import free_port
from sidecar.tooling.benchmarks.processors import (
    split_environment,
    split_option,
    start_processor,
)
from sidecar.tooling.benchmarks.prompt_estimate import estimate_prompt_tokens
from sidecar.tooling.stack import envoy_config
from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.processes import ManagedProcess, tree_cpu_seconds
from sidecar.tooling.stack.stack import Stack, StackOptions, start_envoy, start_sidecar

PROMPT = "Where is my order? It was due on Monday and the tracking page shows nothing. " * 4
BODY = {"model": "mock-llm", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 1}
CORE_KEY, BATCH_KEY, FLOOD_KEY = "bench-core", "bench-batch", "bench-flood"
OTHER_POOL = "small"  # where P2 overflows in the overflow measurement
OVERFLOW_BLOCK = 50  # requests of one kind in a row
FLOOD_RATE = 20  # requests a second the flooding tenant's own budget allows
CANNED = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": "mock-llm",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Monday."},
            "finish_reason": "length",
        }
    ],
    "usage": {"prompt_tokens": 90, "completion_tokens": 1, "total_tokens": 91},
}


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 10) - 1]


# --- the Envoys -----------------------------------------------------------------------


def canned_upstream(port: int, admin_port: int) -> dict[str, Any]:
    """An Envoy that answers every request with the same chat completion."""
    return {
        "admin": {
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}
        },
        "static_resources": {
            "listeners": [
                {
                    "name": "canned",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters."
                                        "network.http_connection_manager.v3.HttpConnectionManager",
                                        "stat_prefix": "canned",
                                        "codec_type": "AUTO",
                                        "route_config": {
                                            "virtual_hosts": [
                                                {
                                                    "name": "canned",
                                                    "domains": ["*"],
                                                    "routes": [
                                                        {
                                                            "match": {"prefix": "/"},
                                                            "direct_response": {
                                                                "status": 200,
                                                                "body": {
                                                                    "inline_string": json.dumps(
                                                                        CANNED
                                                                    )
                                                                },
                                                            },
                                                            "response_headers_to_add": [
                                                                {
                                                                    "header": {
                                                                        "key": "content-type",
                                                                        "value": "application/json",
                                                                    }
                                                                }
                                                            ],
                                                        }
                                                    ],
                                                }
                                            ]
                                        },
                                        "http_filters": [
                                            {
                                                "name": "envoy.filters.http.router",
                                                "typed_config": {
                                                    "@type": "type.googleapis.com/envoy.extensions."
                                                    "filters.http.router.v3.Router"
                                                },
                                            }
                                        ],
                                    },
                                }
                            ]
                        }
                    ],
                }
            ]
        },
    }


def gateway_config(
    port: int,
    admin_port: int,
    processor_ports: list[int],
    upstream_port: int,
) -> dict[str, Any]:
    """The shipped envoy.yaml on these ports; without a processor, Envoy alone; with
    several, Envoy spreads its streams over them."""
    config = envoy_config.adapt(
        envoy_config.load(),
        listen=("127.0.0.1", port),
        admin_port=admin_port,
        sidecar=("127.0.0.1", 1),
        upstreams=[("127.0.0.1", upstream_port)],
        pools={OTHER_POOL: [("127.0.0.1", upstream_port)]},  # where overflow goes
    )
    if not processor_ports:
        return envoy_config.without_qos(config)
    addresses = [
        {"socket_address": {"address": "127.0.0.1", "port_value": p}} for p in processor_ports
    ]
    clusters = config["static_resources"]["clusters"]
    sidecar = next(c for c in clusters if c["name"] == "qos_sidecar")
    endpoints = [{"endpoint": {"address": address}} for address in addresses]
    sidecar["load_assignment"]["endpoints"] = [{"lb_endpoints": endpoints}]
    return config


@dataclass
class Gateway:
    name: str
    port: int
    envoy: ManagedProcess
    processor: ManagedProcess | None  # the ext_proc server behind it
    admin_url: str = ""  # a qos-sidecar's admin HTTP server (metrics)
    latencies: list[float] = field(default_factory=list)

    def cached_refusals(self) -> float:
        """Budget refusals its sidecar answered without Redis, so far."""
        samples = scrape(f"{self.admin_url}/metrics")
        # Summed over its worker processes' (label process) with serve --processes.
        name = "qos_budget_refusals_cached_total{"
        return sum(value for key, value in samples.items() if key.startswith(name))


# --- load -----------------------------------------------------------------------------


def post(connection: http.client.HTTPConnection, key: str) -> tuple[int, str | None]:
    status, decision, _ = post_seen(connection, key)
    return status, decision


def post_seen(
    connection: http.client.HTTPConnection, key: str
) -> tuple[int, str | None, str | None]:
    """Its status, the sidecar's decision when it answered, and the pool that served it
    instead of its own (x-qos-overflow) when one did."""
    connection.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(BODY),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    response = connection.getresponse()
    response.read()
    return (
        response.status,
        response.getheader("x-qos-decision"),
        response.getheader("x-qos-overflow"),
    )


def admit_path(gateways: list[Gateway], rounds: int) -> None:
    """One request at a time, the gateways taking turns; every one must be admitted."""
    connections = [http.client.HTTPConnection("127.0.0.1", g.port) for g in gateways]
    for index in range(rounds + 200):  # the first 200 warm up connections and caches
        for gateway, connection in zip(gateways, connections, strict=True):
            started = time.perf_counter()
            status, decision = post(connection, CORE_KEY)
            elapsed = time.perf_counter() - started
            if status != 200 or decision is not None:
                raise SystemExit(f"{gateway.name}: not admitted ({status}, {decision})")
            if index >= 200:
                gateway.latencies.append(elapsed)
        time.sleep(0.002)  # low load: the gateways are idle between requests
    for connection in connections:
        connection.close()


def shed_path(gateways: list[Gateway], rate: float, seconds: float) -> dict[str, dict]:
    """P2 on an open schedule, the gateways taking turns; latencies by gateway and outcome,
    each from the moment its request was sent."""
    connections = [http.client.HTTPConnection("127.0.0.1", g.port) for g in gateways]
    outcomes: dict[str, dict] = {g.name: {"admitted": [], "shed": [], "late": []} for g in gateways}
    started = time.perf_counter()
    for index in range(int(rate * seconds)):
        planned = started + index / rate
        if (wait := planned - time.perf_counter()) > 0:
            time.sleep(wait)
        gateway = gateways[index % len(gateways)]
        sent = time.perf_counter()
        status, decision = post(connections[index % len(gateways)], BATCH_KEY)
        if status != 200:
            raise SystemExit(f"P2 request failed: {status} {decision}")
        mine = outcomes[gateway.name]
        mine["admitted" if decision is None else "shed"].append(time.perf_counter() - sent)
        mine["late"].append(sent - planned)
    for connection in connections:
        connection.close()
    return outcomes


def overflow_path(gateway: Gateway, rounds: int, counter: redis.Redis) -> dict[str, dict]:
    """Blocks of P1 requests admitted at home and of P2 requests its pool sheds for budget
    and another pool serves, in turn: latency and EVALSHA per request of each."""
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port)
    found: dict[str, dict] = {
        kind: {"latencies": [], "evalsha": 0, "requests": 0} for kind in ("home", "overflow")
    }
    # P2's home bucket may still hold what it refilled at its old rate (the runs before
    # take longer with more variants): spend it, until P2 overflows as measured.
    for _ in range(OVERFLOW_BLOCK):
        status, _decision, moved = post_seen(connection, BATCH_KEY)
        if status == 200 and moved is not None and moved.startswith(OTHER_POOL):
            break
    else:
        raise SystemExit("overflow: P2 is still served at home")
    for block in range(2 * rounds // OVERFLOW_BLOCK):
        kind, key = ("home", CORE_KEY) if block % 2 == 0 else ("overflow", BATCH_KEY)
        mine, before = found[kind], redis_calls(counter).get("evalsha", 0)
        for _ in range(OVERFLOW_BLOCK):
            started = time.perf_counter()
            status, decision, moved = post_seen(connection, key)
            elapsed = time.perf_counter() - started
            served_there = moved is not None and moved.startswith(OTHER_POOL)
            if status != 200 or decision is not None or served_there != (kind == "overflow"):
                raise SystemExit(f"{kind}: {status} {decision} {moved}")
            mine["latencies"].append(elapsed)
        mine["evalsha"] += redis_calls(counter).get("evalsha", 0) - before
        mine["requests"] += OVERFLOW_BLOCK
        time.sleep(0.002)
    connection.close()
    return found


def flood(gateway: Gateway, seconds: float, counter: redis.Redis) -> dict[str, float]:
    """One tenant sends as fast as one connection goes, far above its own budget, through
    one gateway: refusals, how many its sidecar answered without Redis, Redis calls."""
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port)
    refused: list[float] = []
    cached, evalsha = gateway.cached_refusals(), redis_calls(counter).get("evalsha", 0)
    requests, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        sent = time.perf_counter()
        status, decision = post(connection, FLOOD_KEY)
        requests += 1
        if decision == "tenant_rate_limited":
            refused.append(time.perf_counter() - sent)
        elif status != 200:
            raise SystemExit(f"flood: {status} {decision}")
    connection.close()
    return {
        "requests": requests,
        "refused": len(refused),
        "refused_without_redis": gateway.cached_refusals() - cached,
        "evalsha_per_request": (redis_calls(counter).get("evalsha", 0) - evalsha) / requests,
        "refused_p50_ms": _ms(refused, 50),
        "refused_p99_ms": _ms(refused, 99),
    }


def wrk_script(path: Path) -> Path:
    body = json.dumps(json.dumps(BODY))  # a Lua string literal
    path.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = {body}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {CORE_KEY}"\n'
    )
    return path


def max_throughput(
    gateway: Gateway, script: Path, seconds: float, connections: int, pids: dict[str, int]
) -> tuple[float, int, dict[str, float]]:
    """Requests a second wrk got through, how many, and CPU seconds each process spent."""
    # A processor's workers (serve --processes) count as its own.
    before = {name: tree_cpu_seconds(pid) for name, pid in pids.items()}
    result = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{round(seconds)}s",
            "-s",
            str(script),
            f"http://127.0.0.1:{gateway.port}/v1/chat/completions",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    spent = {name: tree_cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    completed = int(re.search(r"(\d+) requests in", result.stdout).group(1))
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", result.stdout).group(1))
    if "Non-2xx" in result.stdout:
        raise SystemExit(f"{gateway.name}: errors under wrk:\n{result.stdout}")
    return rate, completed, spent


def redis_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): value["calls"] for name, value in stats.items()}


# --- the run --------------------------------------------------------------------------


def configure(stack: Stack, batch_rate_rps: float) -> None:
    """Budgets far above the load for P1; P2's budget 1/2.5 of what the shed run offers."""
    cost = estimate_prompt_tokens(BODY)
    stack.config.set(budgets(batch_rate_rps))
    stack.config.tenant("bench-core", "p1", CORE_KEY)
    stack.config.tenant("bench-batch", "p2", BATCH_KEY)
    stack.config.tenant(
        "bench-flood", "p1", FLOOD_KEY, rate_tokens_per_second=FLOOD_RATE * cost, burst_seconds=1
    )


def budgets(batch_rate_rps: float, capacity: float = 1e9) -> dict[str, Any]:
    """The configuration of the admit, shed and flood runs."""
    cost = estimate_prompt_tokens(BODY)
    return {
        "fleet": {"capacity_tokens_per_second": capacity, "max_concurrency": 100_000},
        "tiers": {
            "p2": {
                "share": batch_rate_rps * cost / 2.5 / capacity,
                "burst_seconds": 1.0,
                "max_queue_wait_seconds": 0,
                "shed_below_free_kv": None,
                "shed_above_inflight": None,
            },
        },
        # The bench sets shares itself; the controller would move them.
        "controller": {"enabled": False, "floors": {"p2": 1e-9}},
    }


def configure_overflow(stack: Stack, batch_rate_rps: float) -> None:
    """P2's own pool with a budget of one request's cost every 1 000 s (the run takes
    seconds: a budget refilling every 10 s let a P2 request in at home on a slow run),
    and a second pool whose P2 budget is far above the load: each P2 request is shed at
    home for budget and served by the other pool, the one Redis call taking from its
    budgets."""
    cost = estimate_prompt_tokens(BODY)
    capacity = 1e9
    home = {"share": cost / 1000 / capacity, "burst_seconds": 1000, "overflow": [OTHER_POOL]}
    stack.config.set(
        {
            **budgets(batch_rate_rps, capacity),
            "controller": {"enabled": False, "floors": {"p2": 1e-12}},  # the home share's
            # The other pool's upstream is the canned one: no pod reports its load.
            "overload": {"shed_without_reports": []},
            "pools": {
                "default": {"tiers": {"p2": home}},
                OTHER_POOL: {
                    "models": ["small-llm"],
                    "max_model_len": 100_000,
                    "tiers": {"p2": {"share": 0.01}},
                },
            },
        }
    )


def _start_noop(
    stack: Stack, work: Path, python: str, name: str, loop: str = "asyncio"
) -> tuple[int, ManagedProcess]:
    # The default loop unnamed: a tree from before --event-loop runs too (its own floor).
    loop_flags = ["--event-loop", loop] if loop != "asyncio" else []
    return _start_processor(
        stack, work, name, "sidecar.tooling.benchmarks.noop", loop_flags, python
    )


def _start_processor(
    stack: Stack, work: Path, name: str, module: str, flags: list[str], python: str
) -> tuple[int, ManagedProcess]:
    address, processor = start_processor(work, name, module, *flags, python=python)
    stack.processes.append(processor)
    return int(address.rsplit(":", 1)[1]), processor


def start_gateways(
    stack: Stack, work: Path, upstream_port: int, variants: dict[str, list[str]], sink: str
) -> list[Gateway]:
    """alone, noop, bound, qos, then one more qos-sidecar (and Envoy) per variant."""
    noop_port, noop = _start_noop(stack, work, sys.executable, "noop-processor")
    bound_port, bound = _start_processor(
        stack, work, "bound-processor", "sidecar.tooling.benchmarks.lower_bound",
        ["--redis-url", stack.redis_url], sys.executable,
    )  # fmt: skip
    processors = [
        ("alone", [], None, ""),
        ("noop", [noop_port], noop, ""),
        ("bound", [bound_port], bound, ""),
        ("qos", [stack.options.grpc_port], stack.process("sidecar"), stack.sidecar_admin_url),
    ]
    for name, given in variants.items():
        flags, python = split_option(given, "--python", sys.executable)
        flags, environment = split_environment(flags)
        environment = {k: sink if v == "sink" else v for k, v in environment.items()}
        _, loop = split_option(flags, "--event-loop", "asyncio")  # a serve flag too
        if python != sys.executable or loop != "asyncio":  # its own do-nothing floor too
            port, process = _start_noop(stack, work, python, f"noop-processor-{name}", loop)
            processors.append((f"noop-{name}", [port], process, ""))
        # `--processes N` is serve's own: its workers are the process's children, counted.
        sidecar = start_sidecar(
            work, stack.redis_url, "--log-level", "WARNING", *flags,
            name=f"sidecar-{name}", python=python, env=environment,
        )  # fmt: skip
        stack.processes.append(sidecar.process)
        port = int(sidecar.grpc_address.rsplit(":", 1)[1])
        processors.append((name, [port], sidecar.process, sidecar.admin_url))
    gateways = []
    for name, processor_ports, processor, admin_url in processors:
        port, admin_port = free_port(), free_port()
        envoy = start_envoy(
            gateway_config(port, admin_port, processor_ports, upstream_port),
            work,
            admin_port,
            name=f"envoy-{name}",
            concurrency=1,
            env=stack.envoy_env,  # the stack's sidecar asks for its token
        )
        stack.processes.append(envoy)
        gateways.append(Gateway(name, port, envoy, processor, admin_url))
    return gateways


@contextlib.contextmanager
def canned_stack(work: Path) -> Iterator[tuple[Stack, int]]:
    """The local stack (Redis, the configuration, its sidecar and Envoy) and an upstream
    Envoy answering the canned completion: the stack, and that upstream's port."""
    options = StackOptions.on_free_ports(
        work, replicas=1, envoy_concurrency=1, sidecar_args=("--log-level", "WARNING")
    )
    with Stack(options) as stack:
        upstream_port, upstream_admin = free_port(), free_port()
        stack.processes.append(
            start_envoy(
                canned_upstream(upstream_port, upstream_admin),
                work,
                upstream_admin,
                name="envoy-upstream",
                concurrency=1,
            )
        )
        yield stack, upstream_port


def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="qos-bench-") as tmp,
        contextlib.ExitStack() as stack_context,
    ):
        work = Path(tmp)
        with canned_stack(work) as (stack, upstream_port):
            configure(stack, args.shed_rate)
            sink = stack_context.enter_context(otlp_sink.running_sink())
            gateways = start_gateways(stack, work, upstream_port, args.variants, sink)
            print(f"admit path: {args.requests} requests per gateway, taking turns ...", flush=True)
            admit_path(gateways, args.requests)
            print(
                f"shed path: P2 at {args.shed_rate:.0f}/s for {args.shed_seconds:.0f} s ...",
                flush=True,
            )
            sidecars = [g for g in gateways if g.admin_url]  # the qos-sidecar gateways
            cached = [g.cached_refusals() for g in sidecars]
            shed = shed_path(sidecars, args.shed_rate, args.shed_seconds)
            for gateway, before in zip(sidecars, cached, strict=True):
                shed[gateway.name]["cached"] = gateway.cached_refusals() - before
            counter = redis.Redis.from_url(stack.redis_url)
            floods = {}
            for gateway in sidecars:
                print(f"flood: one tenant at full speed through {gateway.name} ...", flush=True)
                floods[gateway.name] = flood(gateway, args.shed_seconds / 2, counter)
            qos = next(g for g in sidecars if g.name == "qos")
            configure_overflow(stack, args.shed_rate)
            print("overflow: P1 at home and P2 to the other pool, in turn ...", flush=True)
            overflowed = overflow_path(qos, args.requests // 2, counter)
            configure(stack, args.shed_rate)  # as before, for the throughput runs
            script = wrk_script(work / "post.lua")
            runs: dict[str, list[dict[str, float]]] = {g.name: [] for g in gateways}
            for round_ in range(args.rounds):  # the gateways in turn, round after round
                # Each round starts further along the list: a gateway's place in a round
                # moves its figures (seen: later ones slower), so no gateway keeps one.
                start = round_ * len(gateways) // args.rounds
                for gateway in gateways[start:] + gateways[:start]:
                    print(
                        f"throughput: wrk against {gateway.name} for {args.seconds:.0f} s"
                        f" (round {round_ + 1} of {args.rounds}) ...",
                        flush=True,
                    )
                    runs[gateway.name].append(wrk_run(gateway, script, args, counter))
            throughput = {name: _median_run(found) for name, found in runs.items()}
            profiles = profile(gateways, script, args) if args.profile else {}
    figures = report(gateways, shed, floods, overflowed, throughput, args)
    if profiles:
        figures["profile"] = report_profile(profiles, throughput)
    return figures


def wrk_run(gateway: Gateway, script: Path, args: argparse.Namespace, counter) -> dict:
    """One wrk run against the gateway: its rate, and per request each process's CPU
    and Redis's commands."""
    pids = {"envoy": gateway.envoy.pid}
    if gateway.processor is not None:
        pids["processor"] = gateway.processor.pid
    before, began = redis_calls(counter), time.monotonic()
    rate, completed, spent = max_throughput(gateway, script, args.seconds, args.connections, pids)
    after, elapsed = redis_calls(counter), time.monotonic() - began
    sent = sum(after.values()) - sum(before.values())
    evalsha = after.get("evalsha", 0) - before.get("evalsha", 0)
    return {
        "requests_per_second": rate,
        "requests": completed,
        "envoy_cpu_ms_per_1k": spent["envoy"] / completed * 1e6,
        "processor_cpu_ms_per_1k": spent.get("processor", 0.0) / completed * 1e6,
        "redis_commands_per_request": sent / completed,
        "redis_evalsha_per_request": evalsha / completed,
        "redis_commands_per_second": sent / elapsed,
        "redis_evalsha_per_second": evalsha / elapsed,
    }


def _median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds (and the rounds' own, for the record)."""
    figures: dict = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    figures["rounds"] = runs
    return figures


def profile(gateways: list[Gateway], script: Path, args: argparse.Namespace) -> dict:
    """Each processor sampled by py-spy under wrk (a run of its own, after the measured
    ones: sampling slows the process down); a flame graph of qos-sidecar too."""
    args.profile.mkdir(parents=True, exist_ok=True)
    found = {}
    for gateway in gateways:
        if gateway.processor is None:
            continue
        print(f"profile: py-spy on {gateway.name} under wrk ...", flush=True)
        raw = args.profile / f"{gateway.name}.txt"
        pid = gateway.processor.pid
        with wrk_running(gateway, script, args.seconds + 3, args.connections):
            before = profiling.thread_cpu(pid)
            profiling.record(pid, args.seconds, raw)
            after = profiling.thread_cpu(pid)
        found[gateway.name] = profiling.split(raw, pid, before, after)
        by_name: dict[str, float] = {}
        for tid, (name, cpu) in after.items():
            name = "main" if tid == pid else name
            by_name[name] = by_name.get(name, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
        total = sum(by_name.values()) or 1.0
        listed = ", ".join(
            f"{name} {100 * cpu / total:.0f} %"
            for name, cpu in sorted(by_name.items(), key=lambda kv: -kv[1])
            if cpu / total >= 0.01
        )
        print(f"  {gateway.name}: CPU by thread: {listed}", flush=True)
        if gateway.name == "qos":
            with wrk_running(gateway, script, args.seconds + 3, args.connections):
                svg = args.profile / "qos-sidecar.svg"
                profiling.record(gateway.processor.pid, args.seconds, svg, form="flamegraph")
    return found


@contextlib.contextmanager
def wrk_running(gateway: Gateway, script: Path, seconds: float, connections: int):
    """wrk against the gateway in the background, for the block's duration (and a
    little more: it outlasts the block, which waits for it)."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{round(seconds)}s", "-s", str(script)]
    url = f"http://127.0.0.1:{gateway.port}/v1/chat/completions"
    load = subprocess.Popen([*command, url], stdout=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # wrk's connections open and the load settles before sampling
        yield
    finally:
        load.wait(timeout=seconds + 30)


def report_profile(profiles: dict[str, dict[str, float]], throughput: dict) -> dict:
    """Each processor's CPU per 1 000 requests split by part (from its throughput run's
    CPU and its profile's shares)."""
    names = list(profiles)
    parts = [part for part, _ in profiling.PARTS] + [profiling.OTHER]
    split = {
        name: {
            part: share * throughput[name]["processor_cpu_ms_per_1k"]
            for part, share in profiles[name].items()
        }
        for name in names
    }
    print()
    print(
        "6. where each processor's CPU goes under wrk (ms per 1k req; the main thread's split"
        " by py-spy's samples, the other threads' counted as gRPC's runtime)"
    )
    print(f"{'part':<18}" + "".join(f"{name:>14}" for name in names))
    for part in parts:
        print(f"{part:<18}" + "".join(f"{split[name][part]:>14.0f}" for name in names))
    print(f"{'total':<18}" + "".join(f"{sum(split[n].values()):>14.0f}" for n in names))
    return split


def report(
    gateways: list[Gateway],
    shed: dict[str, dict],
    floods: dict,
    overflowed: dict[str, dict],
    throughput: dict,
    args,
) -> dict[str, Any]:
    alone = gateways[0]
    width = max(8, *(len(g.name) for g in gateways))
    latency = {
        g.name: {"p50_ms": _ms(g.latencies, 50), "p99_ms": _ms(g.latencies, 99)} for g in gateways
    }
    for row in latency.values():
        row["added_p50_ms"] = row["p50_ms"] - latency["alone"]["p50_ms"]
        row["added_p99_ms"] = row["p99_ms"] - latency["alone"]["p99_ms"]
    print()
    print(f"1. admit path, low load: {len(alone.latencies)} requests each, one at a time, in turn")
    print(
        f"{'gateway':<{width}} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8}"
        f" {'p50 ratio':>10}"
    )
    for name, row in latency.items():
        print(
            f"{name:<{width}} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} "
            f"{row['added_p50_ms']:>8.3f} {row['added_p99_ms']:>8.3f} "
            f"{row['p50_ms'] / latency['alone']['p50_ms']:>9.2f}x"
        )
    shed_figures = {
        name: {
            "shed": len(result["shed"]),
            "admitted": len(result["admitted"]),
            "shed_p50_ms": _ms(result["shed"], 50),
            "shed_p99_ms": _ms(result["shed"], 99),
            "admitted_p50_ms": _ms(result["admitted"], 50),
            "client_late_p99_ms": _ms(result["late"], 99),
            "refused_without_redis": result["cached"],
        }
        for name, result in shed.items()
    }
    print()
    print(
        f"2. shed path: P2 offered at 2.5x its budget, {args.shed_rate:.0f}/s on an open"
        f" schedule, the qos gateways in turn (shared budget)"
    )
    print(
        f"{'gateway':<{width}} {'shed':>6} {'admitted':>9} {'shed p50':>9} {'shed p99':>9}"
        f" {'no Redis':>9}"
    )
    for name, row in shed_figures.items():
        print(
            f"{name:<{width}} {row['shed']:>6} {row['admitted']:>9} "
            f"{row['shed_p50_ms']:>6.3f} ms {row['shed_p99_ms']:>6.3f} ms"
            f" {row['refused_without_redis']:>9.0f}"
        )
    print()
    print(
        f"3. a tenant flooding at full speed through one gateway, its own budget"
        f" {FLOOD_RATE} requests a second"
    )
    print(
        f"{'gateway':<{width}} {'requests':>9} {'refused':>8} {'no Redis':>9}"
        f" {'EVALSHA/req':>12} {'refused p50':>12} {'p99':>9}"
    )
    for name, row in floods.items():
        print(
            f"{name:<{width}} {row['requests']:>9} {row['refused']:>8}"
            f" {row['refused_without_redis']:>9.0f} {row['evalsha_per_request']:>12.3f}"
            f" {row['refused_p50_ms']:>9.3f} ms {row['refused_p99_ms']:>6.3f} ms"
        )
    overflow_figures = report_overflow(overflowed)
    print()
    print(
        f"5. maximum throughput: wrk, 1 thread, {args.connections} connections,"
        f" {args.seconds:.0f} s each, the median of {args.rounds} round(s) in turn"
    )
    print(
        f"{'gateway':<{width}} {'req/s':>8} {'vs noop':>8} {'vs alone':>9} {'envoy CPU':>10}"
        f" {'proc CPU':>9} {'vs floor':>9} {'Redis cmds':>11} {'EVALSHA':>8}"
    )
    print(
        f"{'':<{width}} {'':>8} {'':>8} {'':>9} {'ms/1k req':>10} {'ms/1k req':>9}"
        f" {'CPU':>9} {'per req':>11} {'per req':>8}"
    )
    # What every sidecar asks of Redis while idle (its timers) is the same in every run;
    # the run against Envoy alone, which asks nothing, measures it.
    idle = throughput["alone"]
    for name, row in throughput.items():
        rps = row["requests_per_second"]
        row["redis_commands_per_request_beyond_idle"] = (
            max(0.0, row["redis_commands_per_second"] - idle["redis_commands_per_second"]) / rps
        )
        row["redis_evalsha_per_request_beyond_idle"] = (
            max(0.0, row["redis_evalsha_per_second"] - idle["redis_evalsha_per_second"]) / rps
        )
        floor = throughput[_floor_of(name, throughput)]
        row["vs_floor_rps"] = row["requests_per_second"] / floor["requests_per_second"]
        row["vs_floor_cpu"] = row["processor_cpu_ms_per_1k"] / floor["processor_cpu_ms_per_1k"]
        print(
            f"{name:<{width}} {row['requests_per_second']:>8.0f} "
            f"{row['vs_floor_rps']:>7.2f}x "
            f"{row['requests_per_second'] / throughput['alone']['requests_per_second']:>8.2f}x "
            f"{row['envoy_cpu_ms_per_1k']:>10.0f} {row['processor_cpu_ms_per_1k']:>9.0f} "
            f"{row['vs_floor_cpu']:>8.2f}x "
            f"{row['redis_commands_per_request']:>11.3f} {row['redis_evalsha_per_request']:>8.3f}"
        )
    print(
        "(vs noop, vs floor: against the do-nothing server of the same gRPC runtime: "
        "noop-NAME for a --python variant NAME, else noop)"
    )
    print(
        f"Redis beyond what the idle sidecars ask ({idle['redis_commands_per_second']:.0f}"
        " commands/s, measured during the run against Envoy alone), per request:"
    )
    for name, row in throughput.items():
        if row["processor_cpu_ms_per_1k"] and name in {g.name for g in gateways if g.admin_url}:
            print(
                f"  {name:<{width}} {row['redis_commands_per_request_beyond_idle']:.2f} commands,"
                f" {row['redis_evalsha_per_request_beyond_idle']:.2f} EVALSHA"
            )
    return {
        "admit_path": latency,
        "shed_path": shed_figures,
        "flood": floods,
        "overflow": overflow_figures,
        "throughput": throughput,
    }


def _floor_of(name: str, throughput: dict) -> str:
    """The do-nothing server a gateway is compared with: its own runtime's."""
    return f"noop-{name}" if f"noop-{name}" in throughput else "noop"


def report_overflow(found: dict[str, dict]) -> dict[str, dict[str, float]]:
    figures = {
        kind: {
            "requests": row["requests"],
            "p50_ms": _ms(row["latencies"], 50),
            "p99_ms": _ms(row["latencies"], 99),
            "evalsha_per_request": row["evalsha"] / row["requests"],
        }
        for kind, row in found.items()
    }
    print()
    print("4. overflow: through qos, in turn: P1 admitted at home; P2 its pool sheds for")
    print("   budget, served by the other pool")
    print(f"{'request':<10} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {'EVALSHA/req':>12}")
    for kind, row in figures.items():
        print(
            f"{kind:<10} {row['requests']:>9} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f}"
            f" {row['evalsha_per_request']:>12.2f}"
        )
    home, moved = figures["home"], figures["overflow"]
    print(
        f"an overflowed request: {moved['evalsha_per_request'] - home['evalsha_per_request']:+.2f}"
        f" EVALSHA and {moved['p50_ms'] - home['p50_ms']:+.3f} ms at p50 beside one admitted"
        " at home (a second Redis call would add 1.00 EVALSHA; both counts include the"
        " idle sidecars' own)"
    )
    return figures


def _ms(seconds: list[float], q: float) -> float:
    if len(seconds) < 2:  # a short run that shed (or admitted) next to nothing
        return float("nan")
    return percentile(seconds, q) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="admit-path requests each")
    parser.add_argument("--seconds", type=float, default=10, help="wrk run per gateway")
    parser.add_argument("--connections", type=int, default=16, help="wrk connections")
    parser.add_argument(
        "--rounds", type=int, default=1, help="wrk runs per gateway, in turn (medians shown)"
    )
    parser.add_argument("--shed-rate", type=float, default=200, help="P2 requests a second")
    parser.add_argument("--shed-seconds", type=float, default=10)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="then profile each processor under wrk with py-spy: DIR/NAME.txt (collapsed "
        "stacks), DIR/qos-sidecar.svg (a flame graph), and print where the CPU goes",
    )
    measure(parser, run)


VARIANT_HELP = (
    "one more qos-sidecar side by side, started with these serve flags, e.g. "
    "'no-cache=--no-over-limit-cache' or 'p2=--processes 2' (repeat); the bench's "
    "own: --python PATH (another venv's interpreter: its gRPC runtime); with it or "
    "--event-loop uvloop, a do-nothing server of its own beside it; --env NAME=VALUE "
    "(repeat) for its environment, and --env OTEL_EXPORTER_OTLP_ENDPOINT=sink: the "
    "bench's own OTLP receiver, which counts and drops what it is sent"
)


def measure(
    parser: argparse.ArgumentParser, run_with: Callable[[argparse.Namespace], dict[str, Any]]
) -> None:
    """The benches of these gateways from their command line: --variant added and read
    into args.variants (name -> serve flags), wrk checked for, the figures written to
    --json when asked."""
    parser.add_argument(
        "--variant", action="append", default=[], metavar="NAME=FLAGS", help=VARIANT_HELP
    )
    args = parser.parse_args()
    args.variants = {}
    for variant in args.variant:
        name, _, flags = variant.partition("=")
        args.variants[name] = flags.split()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install wrk")
    figures = run_with(args)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
