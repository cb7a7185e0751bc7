"""Long prompts through the gateway, side by side with the floor: what each byte costs.

The harness of bench/gateway.py (Envoy with one worker in front of a canned upstream;
`alone`, `noop` the do-nothing ext_proc, `bound` the least policy, `qos` qos-sidecar with
its full policy, P1 with no watermark), and `admit-all`: qos-sidecar with no decision
(`--decider admit-all`), its gRPC server, access-log stream and background loops all
running, so that `qos` less `admit-all` is what the decision itself costs. With chat
requests whose prompt is long:

  doc32k   a retrieval request: a system prompt, a 32 000-token document (about 128 KB
           of text) and a question, as separate messages
  220kb    one user message of 220 KB of text (about 55 000 tokens)

For each prompt, in turn:
  1. one at a time: the gateways taking turns, p50 and p99;
  2. under load: wrk with 20 and then 150 connections against each gateway in turn
     (closed loop), wrk's own p50 and p99, requests a second, and the CPU each process
     spent per request.

With --profile DIR, qos-sidecar is then sampled by py-spy under wrk with each prompt
(DIR/NAME.txt, collapsed stacks) and its CPU per request split by part.

Run: .venv/bin/python bench/long_prompts.py [--requests 300] [--seconds 8] [--json FILE]
(needs wrk: apt-get install wrk)
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import gateway as harness
import profiling

from sidecar.tooling.stack.processes import tree_cpu_seconds
from sidecar.tooling.stack.stack import Stack

SENTENCE = (
    "the order ships from the northern warehouse once payment clears and the carrier "
    "confirms a pickup window; refunds for damaged items are issued within five working "
    "days of the return scan, and customers on the annual plan keep free delivery"
)
WORDS = SENTENCE.split(" ")


def document(chars: int, seed: int) -> str:
    """Deterministic prose of about `chars` characters, numbered sentences (no two
    documents alike, so nothing downstream can cache one)."""
    sentences, size, index = [], 0, 0
    while size < chars:
        words = [WORDS[(seed + index * 7 + k * 3) % len(WORDS)] for k in range(14)]
        sentence = f"{index + 1}. {' '.join(words).capitalize()}."
        sentences.append(sentence)
        size += len(sentence) + 1
        index += 1
    return " ".join(sentences)[:chars]


def bodies() -> dict[str, dict[str, Any]]:
    doc = document(128_000, seed=1)
    return {
        "doc32k": {
            "model": "mock-llm",
            "messages": [
                {"role": "system", "content": "Answer from the document only."},
                {"role": "user", "content": f"<document>\n{doc}\n</document>"},
                {"role": "user", "content": "When are refunds for damaged items issued?"},
            ],
            "max_tokens": 1,
        },
        "220kb": {
            "model": "mock-llm",
            "messages": [{"role": "user", "content": document(220_000, seed=2)}],
            "max_tokens": 1,
        },
    }


def configure(stack: Stack) -> None:
    """bench/gateway.py's tenants and budgets, and P1 never shed for load: a long prompt
    would fill the mock engine's projected KV cache, and the figures are the gateway's."""
    harness.configure(stack, batch_rate_rps=200)
    config = harness.budgets(batch_rate_rps=200)
    config["tiers"]["p1"] = {"shed_below_free_kv": None, "shed_above_inflight": None}
    stack.config.set(config)


def one_at_a_time(gateways: list, body: bytes, rounds: int) -> dict[str, list[float]]:
    """Each gateway in turn, one request at a time; every one must be admitted."""
    connections = [http.client.HTTPConnection("127.0.0.1", g.port) for g in gateways]
    latencies: dict[str, list[float]] = {g.name: [] for g in gateways}
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {harness.CORE_KEY}"}
    for index in range(rounds + 30):  # the first 30 warm up connections and caches
        for gateway, connection in zip(gateways, connections, strict=True):
            started = time.perf_counter()
            connection.request("POST", "/v1/chat/completions", body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            elapsed = time.perf_counter() - started
            if response.status != 200 or response.getheader("x-qos-decision") is not None:
                decision = response.getheader("x-qos-decision")
                raise SystemExit(f"{gateway.name}: not admitted ({response.status}, {decision})")
            if index >= 30:
                latencies[gateway.name].append(elapsed)
        time.sleep(0.002)
    for connection in connections:
        connection.close()
    return latencies


def wrk_script(path: Path, body_file: Path) -> Path:
    """The request with the body from the file; answers the sidecar gave itself (a shed
    request's fallback is a 200 too) counted, printed as `answered here: N`."""
    path.write_text(
        f'local file = io.open("{body_file}", "rb")\n'
        "wrk.body = file:read('*a')\n"
        "file:close()\n"
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {harness.CORE_KEY}"\n'
        "local threads = {}\n"
        "function setup(thread) table.insert(threads, thread) end\n"
        "function init(args) here = 0 end\n"
        "function response(status, headers, body)\n"
        '  if headers["x-qos-decision"] ~= nil then here = here + 1 end\n'
        "end\n"
        "function done(summary, latency, requests)\n"
        "  local total = 0\n"
        '  for _, thread in ipairs(threads) do total = total + thread:get("here") end\n'
        '  io.write(string.format("answered here: %d\\n", total))\n'
        "end\n"
    )
    return path


_WRK_LATENCY = re.compile(r"^\s+(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
_UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def under_load(gateway, script: Path, connections: int, seconds: float) -> dict[str, float]:
    """wrk's rate and latency percentiles, and the CPU each process spent per request."""
    pids = {"envoy": gateway.envoy.pid}
    if gateway.processor is not None:
        pids["processor"] = gateway.processor.pid
    before = {name: tree_cpu_seconds(pid) for name, pid in pids.items()}
    result = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{round(seconds)}s", "--latency",
         "--timeout", "30s", "-s", str(script),
         f"http://127.0.0.1:{gateway.port}/v1/chat/completions"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    spent = {name: tree_cpu_seconds(pid) - before[name] for name, pid in pids.items()}
    here = re.search(r"answered here: (\d+)", result.stdout)
    if "Non-2xx" in result.stdout or "Socket errors" in result.stdout or here is None:
        raise SystemExit(f"{gateway.name}: errors under wrk:\n{result.stdout}")
    if int(here[1]):  # every request is to reach the upstream: the figures are the admit path's
        raise SystemExit(f"{gateway.name}: {here[1]} requests not admitted:\n{result.stdout}")
    completed = int(re.search(r"(\d+) requests in", result.stdout).group(1))
    found = {q: float(v) * _UNIT_MS[u] for q, v, u in _WRK_LATENCY.findall(result.stdout)}
    return {
        "requests_per_second": float(re.search(r"Requests/sec:\s+([\d.]+)", result.stdout)[1]),
        "p50_ms": found["50"],
        "p99_ms": found["99"],
        "envoy_cpu_ms": spent["envoy"] / completed * 1e3,
        "processor_cpu_ms": spent.get("processor", 0.0) / completed * 1e3,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="qos-bench-long-") as tmp:
        work = Path(tmp)
        with harness.canned_stack(work) as (stack, upstream_port):
            configure(stack)
            variants = {"admit-all": ["--decider", "admit-all"], **args.variants}
            gateways = harness.start_gateways(stack, work, upstream_port, variants, "")
            for name, body in bodies().items():
                raw = json.dumps(body).encode()
                body_file = work / f"{name}.json"
                body_file.write_bytes(raw)
                print(f"{name}: {len(raw) / 1000:.0f} KB, one at a time ...", flush=True)
                alone = one_at_a_time(gateways, raw, args.requests)
                script = wrk_script(work / f"{name}.lua", body_file)
                loaded: dict[int, dict[str, list[dict[str, float]]]] = {}
                for connections in args.concurrency:
                    loaded[connections] = {g.name: [] for g in gateways}
                    for round_ in range(args.rounds):
                        start = round_ * len(gateways) // args.rounds
                        for gateway in gateways[start:] + gateways[:start]:
                            print(
                                f"{name}: wrk -c{connections} against {gateway.name}"
                                f" (round {round_ + 1} of {args.rounds}) ...",
                                flush=True,
                            )
                            found = under_load(gateway, script, connections, args.seconds)
                            loaded[connections][gateway.name].append(found)
                figures[name] = report(name, len(raw), gateways, alone, loaded)
                if args.profile:
                    qos = next(g for g in gateways if g.name == "qos")
                    figures[name]["profile"] = profile(qos, script, name, args)
    return figures


def report(name, size, gateways, alone, loaded) -> dict[str, Any]:
    names = [g.name for g in gateways]
    floor = "noop"
    single = {n: {"p50_ms": _ms(alone[n], 50), "p99_ms": _ms(alone[n], 99)} for n in names}
    print()
    print(f"{name} ({size / 1000:.0f} KB): one at a time, {len(alone[names[0]])} each, in turn")
    print(f"{'gateway':<10} {'p50 ms':>8} {'p99 ms':>8} {'+p50 vs floor':>14}")
    for n in names:
        row = single[n]
        row["over_floor_p50_ms"] = row["p50_ms"] - single[floor]["p50_ms"]
        over = row["over_floor_p50_ms"]
        print(f"{n:<10} {row['p50_ms']:>8.2f} {row['p99_ms']:>8.2f} {over:>+14.2f}")
    concurrent: dict[int, dict[str, dict[str, float]]] = {}
    for connections, runs in loaded.items():
        medians = {
            n: {k: statistics.median(r[k] for r in found) for k in found[0]}
            for n, found in runs.items()
        }
        print()
        print(f"{name}: wrk -c{connections}, the median of {len(runs[names[0]])} run(s) each")
        print(
            f"{'gateway':<10} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'p50/floor':>10}"
            f" {'envoy CPU':>10} {'proc CPU':>9}"
        )
        print(f"{'':<10} {'':>7} {'':>8} {'':>8} {'':>10} {'ms/req':>10} {'ms/req':>9}")
        for n in names:
            row = medians[n]
            row["p50_vs_floor"] = row["p50_ms"] / medians[floor]["p50_ms"]
            row["p50_of_each_run"] = [r["p50_ms"] for r in runs[n]]
            print(
                f"{n:<10} {row['requests_per_second']:>7.0f} {row['p50_ms']:>8.1f}"
                f" {row['p99_ms']:>8.1f} {row['p50_vs_floor']:>9.2f}x"
                f" {row['envoy_cpu_ms']:>10.2f} {row['processor_cpu_ms']:>9.2f}"
            )
        concurrent[connections] = medians
    print(flush=True)
    return {"bytes": size, "one_at_a_time": single, "concurrency": concurrent}


def profile(qos, script: Path, name: str, args: argparse.Namespace) -> dict[str, float]:
    """qos-sidecar under wrk with this prompt, sampled by py-spy: its CPU per request by
    part (ms)."""
    args.profile.mkdir(parents=True, exist_ok=True)
    raw = args.profile / f"{name}.txt"
    pid = qos.processor.pid
    seconds, connections = args.seconds + 3, min(args.concurrency)
    print(f"profile: py-spy on qos under wrk -c{connections} with {name} ...", flush=True)
    before_cpu = tree_cpu_seconds(pid)
    command = ["wrk", "-t1", f"-c{connections}", f"-d{round(seconds)}s", "-s", str(script)]
    url = f"http://127.0.0.1:{qos.port}/v1/chat/completions"
    load = subprocess.Popen([*command, url], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        before = profiling.thread_cpu(pid)
        profiling.record(pid, args.seconds, raw)
        after = profiling.thread_cpu(pid)
    finally:
        output, _ = load.communicate(timeout=seconds + 30)
    completed = int(re.search(r"(\d+) requests in", output).group(1))
    per_request = (tree_cpu_seconds(pid) - before_cpu) / completed * 1e3
    shares = profiling.split(raw, pid, before, after)
    split = {part: share * per_request for part, share in shares.items()}
    print(f"qos CPU per {name} request under profiling, by part (ms):")
    for part, ms in split.items():
        print(f"  {part:<18} {ms:>7.3f}")
    print(flush=True)
    return split


def _ms(seconds: list[float], q: float) -> float:
    return harness.percentile(seconds, q) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="one-at-a-time requests each")
    parser.add_argument("--seconds", type=float, default=8, help="each wrk run")
    parser.add_argument("--rounds", type=int, default=1, help="wrk runs per gateway, in turn")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[20, 150], help="wrk connections"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="then profile qos-sidecar")
    harness.measure(parser, run)


if __name__ == "__main__":
    main()
