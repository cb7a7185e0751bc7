"""`qos-sidecar bench promo`: the flash sale, once without QoS and once with it.

Starts the local stack on free ports (Redis, N mock vLLM replicas with priority
scheduling and their reporters, the sidecar, Envoy) and a second Envoy with the same
configuration minus QoS, in front of the same replicas. The same planned traffic (see
sidecar.benchmarks.traffic), offered at `--overload` times what the fleet can prefill,
goes first through qos-sidecar, then, once the GPUs have drained, straight through the
Envoy without QoS. Prints a per-tier table; `--json` and `--plot` keep the figures.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from sidecar.benchmarks import report
from sidecar.benchmarks.gateway_timing import shed_times, with_shed_log
from sidecar.benchmarks.load import ERROR, SERVED, SHED, Outcome, offer
from sidecar.benchmarks.traffic import CALLERS, capacity_rps, mean_prompt_tokens, plan
from sidecar.config.schema import QosConfig
from sidecar.options import setting
from sidecar.stack import envoy_config, readiness
from sidecar.stack.ports import free_port
from sidecar.stack.processes import ManagedProcess, StackError
from sidecar.stack.stack import Stack, StackOptions, start_envoy

PREFILL_TOKENS_PER_SECOND = 16_384.0  # the mock's default, per replica
NO_QOS, QOS = "no QoS", "QoS"
PROBE_KEY = "promo-probe"


@dataclass(frozen=True)
class Settings:
    replicas: int = setting(2, None, "mock vLLM replicas, one simulated GPU each")
    overload: float = setting(2.5, None, "offered load, as a multiple of the fleet's capacity")
    seconds: float = setting(40.0, None, "how long each run offers load")
    timeout: float = setting(30.0, None, "a client gives up on a request after this long")
    time_scale: float = setting(1.0, None, "the mock GPUs' time scale (0.1: ten times faster)")
    chunked_prefill: bool = setting(
        True,
        None,
        "the mock GPUs prefill long prompts in chunks beside the decode, as vLLM does by "
        "default; --no-chunked-prefill prefills each whole, the brief's stall",
    )
    seed: int = setting(7, None, "seed of the planned traffic")
    runs: str = setting("qos,no-qos", None, "which runs, in this order: qos, no-qos")
    json: str = setting("", None, "write the figures and the timelines to this file")
    plot: str = setting("", None, "write a PNG of both runs over time to this file")


def configuration(replicas: int, time_scale: float) -> dict:
    """What a platform team sets for the sale: the fleet's real capacity; batch told at
    once to come back later rather than held, and kept to prompts whose prefill cannot
    stall payments for long."""
    capacity = replicas * PREFILL_TOKENS_PER_SECOND / time_scale
    return {
        "fleet": {"capacity_tokens_per_second": capacity},
        "tiers": {
            "p2": {"burst_seconds": 6, "max_prompt_tokens": 8192, "max_queue_wait_seconds": 0}
        },
    }


def main(settings: Settings) -> int:
    fleet_prefill = settings.replicas * PREFILL_TOKENS_PER_SECOND / settings.time_scale
    capacity = capacity_rps(fleet_prefill)
    rate = settings.overload * capacity
    requests = plan(rate, settings.seconds, settings.seed)
    prefill = "chunked" if settings.chunked_prefill else "whole (unchunked)"
    print(
        f"flash sale: {settings.replicas} GPUs prefilling {fleet_prefill:,.0f} tokens/s, "
        f"prompts {prefill}, take "
        f"{capacity:.1f} requests/s of this mix (mean prompt {mean_prompt_tokens():,.0f} "
        f"tokens); offering {settings.overload:g}x = {rate:.1f}/s for {settings.seconds:g} s "
        f"({len(requests)} requests)",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="qos-promo-"))
    shed_log = work / "envoy-sheds.log"
    gateway = envoy_config.write(with_shed_log(envoy_config.load(), shed_log), work / "qos.yaml")
    options = StackOptions.on_free_ports(
        work,
        envoy_config=gateway,
        replicas=settings.replicas,
        time_scale=settings.time_scale,
        mock_args=(
            "--scheduling-policy",
            "priority",
            "--log-level",
            "WARNING",
            "--chunked-prefill" if settings.chunked_prefill else "--no-chunked-prefill",
        ),
        sidecar_args=("--log-level", "WARNING"),
    )
    outcomes: dict[str, list[Outcome]] = {}
    probes: dict[str, dict] = {}
    try:
        with Stack(options) as stack:
            stack.config.set(configuration(settings.replicas, settings.time_scale))
            for caller in CALLERS:
                stack.config.tenant(caller.tenant, caller.tier, caller.api_key)
            # The probes' tenant: refused by its own budget, so it takes nobody's.
            stack.config.tenant("probe", "p2", PROBE_KEY, rate_tokens_per_second=1)
            noop_address = _start_noop(stack, work)
            port, admin_port = free_port(), free_port()
            plain = envoy_config.without_qos(stack.envoy_config(port, admin_port))
            stack.processes.append(start_envoy(plain, work, admin_port, name="envoy-no-qos"))
            urls = {NO_QOS: f"http://127.0.0.1:{port}", QOS: stack.envoy_url}
            for run in _runs(settings.runs):
                url = urls[run]
                print(f"[{run}] offering load through {url} ...", flush=True)
                targets = {"qos-sidecar": stack.sidecar_grpc, "do-nothing": noop_address}
                probing = _start_probes(targets, settings.seconds) if run == QOS else {}
                outcomes[run] = asyncio.run(
                    offer(url, requests, settings.timeout, _progress(run, settings.seconds))
                )
                probes.update({name: _probe_result(p) for name, p in probing.items()})
                _wait_until_idle(stack.mock_urls)
    except StackError as error:
        print(f"the stack did not start: {error}")
        return 1
    summaries = {run: report.summarize(result) for run, result in outcomes.items()}
    print()
    print(report.table(summaries))
    for run, result in outcomes.items():
        late = report.percentile((o.late for o in result), 99)
        print(f"{run}: the load generator sent its requests up to {late:.1f} ms late (p99)")
    gateway_sheds = shed_times(shed_log) if QOS in outcomes else {}
    for tier, figures in gateway_sheds.items():
        if figures["p99_ms"] is not None:
            print(
                f"{QOS}: Envoy timed the {tier.upper()} sheds at p50 {figures['p50_ms']:.1f} ms,"
                f" p99 {figures['p99_ms']:.1f} ms (first byte in to last byte out)"
            )
    for name, figures in probes.items():
        print(
            f"meanwhile, a gRPC round trip (one P2 decision at a time, in a process of its own)"
            f" to the {name} processor: p50 {figures['p50_ms']:.2f} ms,"
            f" p99 {figures['p99_ms']:.2f} ms"
        )
    print(f"(logs in {work})")
    timelines = {run: report.timeline(o, settings.seconds) for run, o in outcomes.items()}
    if settings.json:
        figures = {
            "settings": asdict(settings),
            "capacity_rps": capacity,
            "offered_rps": rate,
            "runs": summaries,
            "grpc_probes": probes,
            "gateway_shed_ms": gateway_sheds,
            "timelines": timelines,
        }
        Path(settings.json).write_text(json.dumps(figures, indent=1))
        print(f"figures: {settings.json}")
    if settings.plot:
        from sidecar.benchmarks.plot import plot

        prefill = "chunked" if settings.chunked_prefill else "unchunked"
        title = (
            f"Flash sale at {settings.overload:g}x capacity on {settings.replicas} mock GPUs,"
            f" {prefill} prefill ({len(requests)} requests in {settings.seconds:g} s)"
        )
        slo = QosConfig().slo.targets.p0.ttft_ms
        plot(timelines, Path(settings.plot), title, slo)
        print(f"plot: {settings.plot}")
    return 0


def _start_noop(stack: Stack, work: Path) -> str:
    """The do-nothing ext_proc server, probed beside the sidecar: the runtime's floor."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    noop = ManagedProcess(
        "noop-processor",
        [sys.executable, "-m", "sidecar.benchmarks.noop", "--port", str(port)],
        work / "noop-processor.log",
    )
    stack.processes.append(noop.start_ready(lambda: readiness.grpc_serving(address)))
    return address


def _start_probes(targets: dict[str, str], seconds: float) -> dict[str, subprocess.Popen]:
    return {
        name: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sidecar.benchmarks.probe",
                address,
                "--seconds",
                str(seconds),
                "--api-key",
                PROBE_KEY,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, address in targets.items()
    }


def _probe_result(process: subprocess.Popen) -> dict:
    output, _ = process.communicate(timeout=60)
    return json.loads(output)


def _runs(names: str) -> list[str]:
    known = {"no-qos": NO_QOS, "qos": QOS}
    runs = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in runs if name not in known]
    if unknown or not runs:
        raise SystemExit(f"--runs takes no-qos and qos, comma-separated; not {unknown or names!r}")
    return [known[name] for name in runs]


def _progress(run: str, seconds: float):
    def show(elapsed: float, outcomes: list[Outcome], total: int) -> None:
        counts = {r: sum(o.result == r for o in outcomes) for r in (SERVED, SHED, ERROR)}
        print(
            f"[{run}] {min(elapsed, seconds):4.0f}/{seconds:g} s  done {len(outcomes)}/{total}:"
            f" served {counts[SERVED]}, shed {counts[SHED]}, errors {counts[ERROR]}",
            flush=True,
        )

    return show


def _wait_until_idle(mock_urls: list[str], within: float = 120.0) -> None:
    """Until no replica runs or queues anything: the next run starts on idle GPUs."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(_requests_on(url) == 0 for url in mock_urls):
            return
        time.sleep(0.2)
    raise SystemExit("the mock GPUs did not drain between the runs")


def _requests_on(mock_url: str) -> float:
    with urllib.request.urlopen(f"{mock_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting"))
    )
