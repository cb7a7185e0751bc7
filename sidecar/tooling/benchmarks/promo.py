"""`qos-sidecar bench promo`: the flash sale, once without QoS and once with it.

Starts the local stack on free ports (Redis, N mock vLLM replicas with priority
scheduling and their reporters, or with `--engine vllm` N engines of vLLM's CPU build;
the sidecar, Envoy) and a second Envoy with the same configuration minus QoS, in front of
the same replicas. The same planned traffic (see sidecar.tooling.benchmarks.traffic),
offered at `--overload` times what the fleet serves of it (see fleet.py), goes first
through qos-sidecar, then, once the GPUs have drained, straight through the Envoy without
QoS. Prints a per-tier table; `--json` and `--plot` keep the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from pydantic import ValidationError

from sidecar.config.schema import QosConfig
from sidecar.options import setting
from sidecar.ports import free_port
from sidecar.tooling.benchmarks import field_tool, litellm_peer, report, screenshots
from sidecar.tooling.benchmarks import fleet as fleets
from sidecar.tooling.benchmarks.busy import BusyShare, wait_until_idle
from sidecar.tooling.benchmarks.comeback import comebacks, told_lines
from sidecar.tooling.benchmarks.field_sale import SEATS, FieldSale
from sidecar.tooling.benchmarks.fleet import Fleet
from sidecar.tooling.benchmarks.gateway_timing import shed_times, with_shed_log
from sidecar.tooling.benchmarks.load import ERROR, SERVED, SHED, Outcome, offer
from sidecar.tooling.benchmarks.traffic import PlannedRequest, mean_prompt_tokens, plan
from sidecar.tooling.mockvllm.server import Settings as MockSettings
from sidecar.tooling.stack import envoy_config, readiness
from sidecar.tooling.stack.processes import (
    ManagedProcess,
    StackError,
    stop_on_sigterm,
    tree_cpu_seconds,
)
from sidecar.tooling.stack.stack import Stack, StackOptions, start_envoy

NO_QOS, QOS = "no QoS", "QoS"
LITELLM = "LiteLLM"  # the peer gateway, LiteLLM's proxy (litellm_peer.py)
# The sale through the sidecar with its wait forecast off (queue.foresee_waits).
QOS_NO_FORECAST = "QoS, no forecast"
# And with the capacity measured before the sale alone in force, whatever the engines
# serve during it (fleet.follow_served_capacity).
QOS_FIXED_CAPACITY = "QoS, capacity fixed"
# The runs through the sidecar, with what each changes of the sale's configuration.
THROUGH_QOS: dict[str, dict[str, dict]] = {
    QOS: {},
    QOS_NO_FORECAST: {"queue": {"foresee_waits": False}},
    QOS_FIXED_CAPACITY: {"fleet": {"follow_served_capacity": False}},
}
PROBE_KEY = "promo-probe"


@dataclass(frozen=True)
class Settings:
    replicas: int = setting(2, None, "mock vLLM replicas (one simulated GPU each), or engines")
    engine: str = setting(
        "mock",
        None,
        "mock: the mock GPUs; vllm: vLLM's CPU build serving the tiny model (installed by "
        "scripts/setup-engine.sh), the prompts scaled to fit it and its capacity measured "
        "first",
    )
    measure_seconds: float = setting(
        20.0, None, "with --engine vllm: how long the engines are kept full to measure them"
    )
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
    pools: int = setting(
        0,
        None,
        "model pools of --replicas GPUs each: the first offered --overload times its "
        "capacity, the others --calm-load times theirs",
    )
    calm_load: float = setting(0.5, None, "with --pools: the other pools' load, x capacity")
    max_concurrency: int = setting(
        0,
        None,
        "the fleet's max_concurrency, requests in flight at most (0: the default); P2 is "
        "shed for it past 80 % of it (tiers.p2.shed_above_inflight)",
    )
    overflow: bool = setting(
        False,
        None,
        "with --pools: the first pool's P1 and P2 overflow to the other pools, served by "
        "their model when the first pool sheds them for its load or budget",
    )
    output_weight: float = setting(
        0.0,
        None,
        "P1's and P2's output_weight: their answers' tokens charged too, reserved at "
        "admission and settled when they end (0: prompts only)",
    )
    engine_priority: bool = setting(
        True,
        None,
        "the sidecar sends each tier's priority to the GPUs (vLLM's priority scheduling); "
        "--no-engine-priority leaves every request at the engine's default priority",
    )
    shares: str = setting(
        "",
        None,
        "P0,P1,P2 shares to start from, e.g. 0.40,0.45,0.15: as far as the SLO controller "
        "lends P0's budget (default: the tiers' defaults)",
    )
    runs: str = setting(
        "qos,no-qos",
        None,
        "which runs, in this order: qos, qos-no-forecast, qos-fixed-capacity, no-qos, "
        "litellm (LiteLLM's proxy in front of the same engines, from its own venv: "
        "scripts/setup-litellm.sh)",
    )
    load_tool: str = setting(
        "ours",
        None,
        "what offers the load: ours (the sale's mix, load.py) or vllm (vLLM's own "
        "`vllm bench serve`, one process per tier on ShareGPT prompts, from the engine's "
        "venv; the table gives its figures beside ours)",
    )
    json: str = setting("", None, "write the figures and the timelines to this file")
    plot: str = setting("", None, "write a PNG of both runs over time to this file")
    screenshots: str = setting(
        "",
        None,
        "save the duty team's page, both themes, 85 % into the QoS run, in this directory "
        "(needs chromium, chromedriver, selenium; the browser takes CPU from the sale)",
    )


def configuration(settings: Settings, fleet: Fleet) -> dict:
    """What a platform team sets for the sale: the fleet's real capacity; the tiers'
    priorities sent to the engines, which run vLLM's priority scheduling (without it a
    payment that reached a GPU waits behind every prompt admitted before it); batch told
    at once to come back later rather than held, and kept to prompts whose prefill cannot
    stall payments for long (scaled with the fleet's prompts)."""
    tiers: dict[str, dict] = {
        "p0": {},
        "p1": {"output_weight": settings.output_weight},
        "p2": {
            "burst_seconds": 6,
            "max_prompt_tokens": 8192 // fleet.prompt_scale,
            "max_queue_wait_seconds": 0,
            "output_weight": settings.output_weight,
        },
    }
    for tier, share in zip(tiers, _shares(settings.shares), strict=False):
        tiers[tier]["share"] = share
    limit = {"max_concurrency": settings.max_concurrency} if settings.max_concurrency else {}
    return {
        "fleet": {"capacity_tokens_per_second": fleet.capacity_tokens_per_second, **limit},
        "engine": {"send_priority": settings.engine_priority},
        "tiers": tiers,
    }


def overflowing(options: StackOptions) -> dict:
    """The stack's pools, the first one's P1 and P2 overflowing to the others, whose
    mocks take their whole default context."""
    pools = options.pools_config()["pools"]
    first, *others = options.pool_names
    pools[first]["tiers"] = {tier: {"overflow": others} for tier in ("p1", "p2")}
    for name in others:
        pools[name]["max_model_len"] = MockSettings().max_model_len
    return {"pools": pools}


def _shares(given: str) -> list[float]:
    if not given:
        return []
    try:
        shares = [float(part) for part in given.split(",")]
    except ValueError:
        shares = []
    if len(shares) != 3:
        raise SystemExit(f"--shares takes three numbers, P0,P1,P2; not {given!r}")
    try:  # held to what the configuration allows (the controller's bounds among them)
        tiers = {tier: {"share": share} for tier, share in zip(report.TIERS, shares, strict=True)}
        QosConfig.from_partial({"tiers": tiers})
    except ValidationError as error:
        raise SystemExit(f"--shares {given}: {error.errors()[0]['msg']}") from None
    return shares


def _traffic(settings: Settings, options: StackOptions, fleet: Fleet) -> list[PlannedRequest]:
    """The planned requests: the flash sale's mix, at --overload times the capacity of the
    fleet (or of the first pool; the others at --calm-load times theirs)."""
    capacity = fleet.capacity_rps
    print(
        f"flash sale: {fleet.description}{' a pool' if settings.pools else ''}, take "
        f"{capacity:.1f} requests/s of this mix (mean prompt "
        f"{mean_prompt_tokens(fleet.callers):,.0f} tokens)",
        flush=True,
    )
    if not settings.pools:
        requests = plan(
            settings.overload * capacity, settings.seconds, settings.seed, fleet.callers
        )
        _say_offered("", settings.overload, capacity, settings.seconds, requests)
        return requests
    requests = []
    for index, pool in enumerate(options.pool_names):
        load = settings.overload if index == 0 else settings.calm_load
        model = options.served_models(index * settings.replicas)[0]
        mine = plan(
            load * capacity,
            settings.seconds,
            settings.seed + index,
            fleet.callers,
            model=model,
            pool=pool,
        )
        _say_offered(f"{pool} ({model}): ", load, capacity, settings.seconds, mine)
        requests += mine
    return sorted(requests, key=lambda request: request.at)


def _say_offered(
    who: str, load: float, capacity: float, seconds: float, requests: list[PlannedRequest]
) -> None:
    print(
        f"{who}offering {load:g}x = {load * capacity:.1f}/s for {seconds:g} s "
        f"({len(requests)} requests)",
        flush=True,
    )


def _by_pool(runs: dict[str, list[Outcome]], pools: tuple[str, ...]) -> dict[str, list[Outcome]]:
    """Each run's outcomes, or with pools each run's per pool ("QoS, pool-a")."""
    if not pools:
        return runs
    return {
        f"{run}, {pool}": [o for o in outcomes if o.pool == pool]
        for run, outcomes in runs.items()
        for pool in pools
    }


def main(settings: Settings) -> int:
    stop_on_sigterm()
    if settings.engine not in ("mock", "vllm"):
        raise SystemExit(f"--engine is mock or vllm, not {settings.engine!r}")
    if settings.load_tool not in ("ours", "vllm"):
        raise SystemExit(f"--load-tool is ours or vllm, not {settings.load_tool!r}")
    if settings.load_tool == "vllm" and settings.pools:
        raise SystemExit("--load-tool vllm drives one pool: use it without --pools")
    if settings.overflow and settings.pools < 2:
        raise SystemExit("--overflow needs --pools 2 or more: a pool to overflow to")
    if settings.engine == "vllm" and settings.pools:
        raise SystemExit("--pools are made of mocks: use them without --engine vllm")
    _shares(settings.shares)  # before any engine starts
    if LITELLM in _runs(settings.runs):
        if settings.pools:
            raise SystemExit("--runs litellm fronts one pool: use it without --pools")
        if not (litellm_peer.venv() / "bin" / "litellm").exists():
            raise SystemExit(
                f"LiteLLM's proxy is not installed in {litellm_peer.venv()}: "
                "run scripts/setup-litellm.sh"
            )
    work = Path(tempfile.mkdtemp(prefix="qos-promo-"))
    with contextlib.ExitStack() as started:
        try:
            fleet = _fleet(settings, work, started)
        except StackError as error:
            print(f"the engines did not start: {error}")
            return 1
        return _sale(settings, fleet, work)


def _fleet(settings: Settings, work: Path, started: contextlib.ExitStack) -> Fleet:
    if settings.engine == "vllm":
        return fleets.real_engines(settings.replicas, work, started, settings.measure_seconds)
    return fleets.mocks(settings.replicas, settings.time_scale, settings.chunked_prefill)


def _sale(settings: Settings, fleet: Fleet, work: Path) -> int:
    """Both runs of the sale on this fleet; the table, the figures, the plot."""
    shed_log = work / "envoy-sheds.log"
    gateway = envoy_config.write(with_shed_log(envoy_config.load(), shed_log), work / "qos.yaml")
    options = StackOptions.on_free_ports(
        work,
        envoy_config=gateway,
        replicas=settings.replicas,
        pools=settings.pools,
        time_scale=settings.time_scale,
        mock_args=(
            "--scheduling-policy",
            "priority",
            "--log-level",
            "WARNING",
            "--chunked-prefill" if settings.chunked_prefill else "--no-chunked-prefill",
            *(("--max-num-seqs", str(SEATS)) if settings.load_tool == "vllm" else ()),
        ),
        sidecar_args=("--log-level", "WARNING", *fleet.sidecar_args),
        **fleet.stack_overrides,
    )
    field = None
    if settings.load_tool == "vllm":
        seats = SEATS if fleet.engines is None else fleets.ENGINE_SETTINGS.max_num_seqs
        field = FieldSale.planned(
            fleet, settings.overload, settings.seconds, settings.seed, work, seats
        )
    requests = _traffic(settings, options, fleet) if field is None else []
    tool_figures: dict[str, dict[str, dict]] = {}
    outcomes: dict[str, list[Outcome]] = {}
    probes: dict[str, dict] = {}
    settlement: dict[str, dict[str, float]] = {}
    busy_shares: dict[str, float | None] = {}
    gateway_cpu_ms: dict[str, float] = {}  # per request offered
    try:
        with Stack(options) as stack:
            if field is not None:
                field, fleet = field.measured(stack.engine_urls)
            overflow = overflowing(options) if settings.overflow else {}
            stack.config.set({**configuration(settings, fleet), **overflow})
            for caller in fleet.callers:
                stack.config.tenant(caller.tenant, caller.tier, caller.api_key)
            # The probes' tenant: refused by its own budget, so it takes nobody's.
            stack.config.tenant("probe", "p2", PROBE_KEY, rate_tokens_per_second=1)
            noop_address = _start_noop(stack, work)
            port, admin_port = free_port(), free_port()
            plain = envoy_config.without_qos(stack.envoy_config(port, admin_port))
            stack.processes.append(start_envoy(plain, work, admin_port, name="envoy-no-qos"))
            urls = {NO_QOS: f"http://127.0.0.1:{port}"}
            urls |= dict.fromkeys(THROUGH_QOS, stack.envoy_url)
            gateways = {NO_QOS: [stack.process("envoy-no-qos").pid]}
            qos_pids = [stack.process("sidecar").pid, stack.process("envoy").pid]
            gateways |= dict.fromkeys(THROUGH_QOS, qos_pids)
            if LITELLM in _runs(settings.runs):
                urls[LITELLM], gateways[LITELLM] = _start_litellm(stack, settings, fleet, work)
            for run in _runs(settings.runs):
                url = urls[run]
                through_qos = run in THROUGH_QOS
                admin = stack.sidecar_admin_url if through_qos else ""
                if through_qos:
                    sale = {**configuration(settings, fleet), **overflow}
                    for key, changed in THROUGH_QOS[run].items():
                        sale[key] = {**sale.get(key, {}), **changed}
                    stack.config.set(sale)
                    stack.config.forget_latencies()  # each QoS run steers from scratch
                print(f"[{run}] offering load through {url} ...", flush=True)
                targets = {"qos-sidecar": stack.sidecar_grpc, "do-nothing": noop_address}
                probing = (
                    _start_probes(targets, settings.seconds, stack.envoy_env) if run == QOS else {}
                )
                shots = None
                if run == QOS and settings.screenshots:
                    shots = screenshots.take_at(
                        time.monotonic() + 0.85 * settings.seconds,
                        stack.dashboard_url,
                        f"{stack.sidecar_admin_url}/dashboard",
                        Path(settings.screenshots),
                    )
                busy = BusyShare(stack.engine_urls, settings.seconds).start()
                cpu = _cpu_seconds(gateways[run])
                if field is not None:
                    outcomes[run], tool_figures[run] = field.run(run, url)
                else:
                    progress = _progress(run, settings.seconds, admin)
                    outcomes[run] = asyncio.run(offer(url, requests, settings.timeout, progress))
                cpu = _cpu_seconds(gateways[run]) - cpu
                gateway_cpu_ms[run] = 1e3 * cpu / max(1, len(outcomes[run]))
                busy_shares[run] = busy.share()
                probes.update({name: _probe_result(p) for name, p in probing.items()})
                if shots is not None:
                    shots.join(timeout=120)  # before the stack they look at stops
                wait_until_idle(stack.engine_urls)
                if run == QOS:
                    _keep_sidecar_metrics(stack.sidecar_admin_url, work / "sidecar-metrics.txt")
                if run == QOS and settings.output_weight > 0:
                    settlement = output_settlement(stack.sidecar_admin_url)
    except StackError as error:
        print(f"the stack did not start: {error}")
        return 1
    views = _by_pool(outcomes, options.pool_names)
    ttft_slo_ms = report.ttft_targets()
    summaries = {run: report.summarize(result, ttft_slo_ms) for run, result in views.items()}
    print()
    print(report.table(summaries))
    if tool_figures:
        print("\nvllm bench serve's figures, beside this harness's reading of its requests:")
        print(field_tool.table(tool_figures, summaries))
    for run, ms in gateway_cpu_ms.items():
        print(f"{run}: the gateway's processes spent {ms:.2f} ms of CPU per request")
    for run, share in busy_shares.items():
        if share is not None:
            print(f"{run}: the GPUs were busy {share:.1%} of the sale's {settings.seconds:g} s")
    for run, result in views.items():
        if said := report.shed_reasons(result):
            print(f"{run}: shed as {said}")
        if waited := report.shed_after_a_wait(result):
            print(f"{run}: shed after a wait: {waited}")
    for run, result in views.items():
        moved = Counter((o.tier, o.served_by) for o in result if o.served_by)
        for (tier, pool), count in sorted(moved.items()):
            print(f"{run}: {count} {tier.upper()} requests were served by {pool}'s model")
    own_load = {} if field is not None else outcomes  # the tool keeps its own time
    for run, result in own_load.items():
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
    told = comebacks(outcomes[QOS]) if QOS in outcomes else {}
    for line in told_lines(QOS, told):
        print(line)
    for tier, counts in settlement.items():
        print(
            f"{QOS}: {tier.upper()} output tokens reserved {counts['reserved']:,.0f}, "
            f"settled {counts['usage']:,.0f} from usage, {counts['estimate']:,.0f} "
            f"estimated and {counts['abandoned']:,.0f} whole for answers their clients left"
        )
    print(f"(logs in {work})")
    timelines = {run: report.timeline(o, settings.seconds) for run, o in views.items()}
    if settings.json:
        document: dict[str, Any] = {
            "settings": asdict(settings),
            "fleet": fleet.description,
            "prompt_scale": fleet.prompt_scale,
            "capacity_rps": fleet.capacity_rps,  # of the fleet, or of each pool
            "offered_rps": settings.overload * fleet.capacity_rps,  # to it, or the first pool
            "runs": summaries,
            "grpc_probes": probes,
            "gateway_shed_ms": gateway_sheds,
            "output_settlement": settlement,
            "comebacks": told,
            "gpu_busy_share": busy_shares,
            "gateway_cpu_ms_per_request": gateway_cpu_ms,
            "load_tool": tool_figures,
            "timelines": timelines,
        }
        Path(settings.json).write_text(json.dumps(document, indent=1))
        print(f"figures: {settings.json}")
    if settings.plot:
        from sidecar.tooling.benchmarks.plot import plot

        offered = len(requests) if field is None else sum(load.prompts for load in field.loads)
        prefill = "chunked" if settings.chunked_prefill else "unchunked"
        where = (
            fleet.name
            if not settings.pools
            else f"pool-a ({fleet.name}; the other pools at {settings.calm_load:g}x)"
        )
        title = (
            f"Flash sale at {settings.overload:g}x capacity on {where}, {prefill} prefill"
            f" ({offered} requests in {settings.seconds:g} s)"
        )
        slo = QosConfig().slo.targets.p0.ttft_ms
        plot(timelines, Path(settings.plot), title, slo)
        print(f"plot: {settings.plot}")
    return 0


def _start_litellm(
    stack: Stack, settings: Settings, fleet: Fleet, work: Path
) -> tuple[str, list[int]]:
    """LiteLLM's proxy in front of the stack's engines, sharing its Redis; its URL and PID."""
    defaults = QosConfig().tiers
    shares = _shares(settings.shares) or [defaults.p0.share, defaults.p1.share, defaults.p2.share]
    setup = litellm_peer.for_sale(
        fleet,
        dict(zip(report.TIERS, shares, strict=True)),
        stack.engine_urls,
        stack.options.redis_port,
        settings.timeout,
    )
    port = free_port()
    proxy = litellm_peer.start(setup.write(work / "litellm"), port, work / "litellm.log")
    stack.processes.append(proxy)
    return f"http://127.0.0.1:{port}", [proxy.pid]


def _cpu_seconds(pids: list[int]) -> float:
    return sum(tree_cpu_seconds(pid) for pid in pids)


def output_settlement(sidecar_admin_url: str) -> dict[str, dict[str, float]]:
    """Per tier, the output tokens reserved and those settled (from usage, estimated),
    as the sidecar counted them."""
    figures: dict[str, dict[str, float]] = {}
    columns = {"qos_output_reserved_tokens_total": "reserved"}
    for sample in _sidecar_samples(sidecar_admin_url):
        if sample.name == "qos_output_settled_tokens_total":
            column = sample.labels["source"]  # usage, estimate or abandoned
        elif sample.name in columns:
            column = columns[sample.name]
        else:
            continue
        tier = sample.labels["tier"]
        figures.setdefault(tier, dict.fromkeys(("reserved", "usage", "estimate", "abandoned"), 0.0))
        figures[tier][column] = sample.value
    return dict(sorted(figures.items()))


def _sidecar_metrics(sidecar_admin_url: str) -> str:
    with urllib.request.urlopen(f"{sidecar_admin_url}/metrics", timeout=5) as response:
        return response.read().decode()


def _sidecar_samples(sidecar_admin_url: str) -> Iterator[Sample]:
    for family in text_string_to_metric_families(_sidecar_metrics(sidecar_admin_url)):
        yield from family.samples


def _keep_sidecar_metrics(sidecar_admin_url: str, path: Path) -> None:
    """The sidecar's counters after the run (queue waits, decisions, shares), beside the
    logs, for reading what happened in a run after the stack is gone."""
    path.write_text(_sidecar_metrics(sidecar_admin_url))


def _start_noop(stack: Stack, work: Path) -> str:
    """The do-nothing ext_proc server, probed beside the sidecar: the runtime's floor."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    noop = ManagedProcess(
        "noop-processor",
        [sys.executable, "-m", "sidecar.tooling.benchmarks.noop", "--port", str(port)],
        work / "noop-processor.log",
    )
    stack.processes.append(noop.start_ready(lambda: readiness.grpc_serving(address)))
    return address


def _start_probes(
    targets: dict[str, str], seconds: float, env: dict[str, str]
) -> dict[str, subprocess.Popen]:
    return {
        name: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sidecar.tooling.benchmarks.probe",
                address,
                "--seconds",
                str(seconds),
                "--api-key",
                PROBE_KEY,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},  # the sidecar's Envoy token, secret
        )
        for name, address in targets.items()
    }


def _probe_result(process: subprocess.Popen) -> dict:
    output, _ = process.communicate(timeout=60)
    return json.loads(output)


def _runs(names: str) -> list[str]:
    known = {
        "no-qos": NO_QOS,
        "qos": QOS,
        "qos-no-forecast": QOS_NO_FORECAST,
        "qos-fixed-capacity": QOS_FIXED_CAPACITY,
        "litellm": LITELLM,
    }
    runs = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in runs if name not in known]
    if unknown or not runs:
        raise SystemExit(
            f"--runs takes {', '.join(known)}, comma-separated; not {unknown or names!r}"
        )
    return [known[name] for name in runs]


def _progress(run: str, seconds: float, sidecar_admin_url: str = ""):
    """Prints the run's progress; with the sidecar's admin URL, the tiers' shares in force
    too (the SLO controller moves them during the run)."""

    def show(elapsed: float, outcomes: list[Outcome], total: int) -> None:
        counts = {r: sum(o.result == r for o in outcomes) for r in (SERVED, SHED, ERROR)}
        shares = ""
        if sidecar_admin_url:
            found = {
                sample.labels["tier"]: sample.value
                for sample in _sidecar_samples(sidecar_admin_url)
                if sample.name == "qos_tier_share_ratio"
            }
            shares = ", shares " + " / ".join(f"{found.get(t, 0):.2f}" for t in ("p0", "p1", "p2"))
        print(
            f"[{run}] {min(elapsed, seconds):4.0f}/{seconds:g} s  done {len(outcomes)}/{total}:"
            f" served {counts[SERVED]}, shed {counts[SHED]}, errors {counts[ERROR]}{shares}",
            flush=True,
        )

    return show
