"""`qos-sidecar bench mix`: interactive bursts beside a batch backlog, the shape of llm-d's
flow-control result.

llm-d published, on one A100, the TTFT of interactive requests arriving in bursts while
batch work keeps the engine saturated: p99 96.5 ms alone, 941 ms with the batch and no
protection, 330 ms with its flow control. This runs the same shape on our engines (vLLM's
CPU build with `--engine vllm`, or the mocks): interactive bursts (payments, P0) every
`--burst-every` seconds, and batch (P2) offered at `--batch-load` times what the engines
prefill, on an open schedule. Four runs, one after the other on drained engines: the
bursts alone, through the same Envoy without QoS and through qos-sidecar; then both,
through each. Each run's interactive TTFT is compared with the bursts alone through the
same gateway, as ratios: llm-d's figures are on a GPU, ours on two shared CPU cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from sidecar.options import setting
from sidecar.ports import free_port
from sidecar.tooling.benchmarks import fleet as fleets
from sidecar.tooling.benchmarks import report
from sidecar.tooling.benchmarks.busy import wait_until_idle
from sidecar.tooling.benchmarks.comeback import comebacks, told_lines
from sidecar.tooling.benchmarks.fleet import Fleet
from sidecar.tooling.benchmarks.load import Outcome, offer
from sidecar.tooling.benchmarks.traffic import PlannedRequest, draw_prompt_tokens, plan
from sidecar.tooling.stack import envoy_config
from sidecar.tooling.stack.processes import StackError, stop_on_sigterm
from sidecar.tooling.stack.stack import Stack, StackOptions, start_envoy

ALONE, NO_QOS = "interactive alone, no QoS", "no QoS"
ALONE_QOS, QOS = "interactive alone, QoS", "QoS"
# Each run's TTFT is compared with the bursts alone through the same gateway.
BASELINE = {ALONE: ALONE, NO_QOS: ALONE, ALONE_QOS: ALONE_QOS, QOS: ALONE_QOS}
# llm-d's flow-control figures (interactive TTFT p99, ms, one A100).
LLM_D = {ALONE: 96.5, NO_QOS: 941.0, ALONE_QOS: 96.5, QOS: 330.0}
MOCK_ARGS = ("--scheduling-policy", "priority", "--log-level", "WARNING")


@dataclass(frozen=True)
class Settings:
    engine: str = setting("vllm", None, "vllm: vLLM's CPU build; mock: the mock GPUs")
    replicas: int = setting(1, None, "engines")
    seats: int = setting(16, None, "sequences each engine runs at once (vLLM's max_num_seqs)")
    interactive_seats: int = setting(
        8,
        None,
        "of them, kept for the interactive bursts: batch is admitted while fewer requests "
        "than the rest are in flight (tiers.p2.shed_above_inflight)",
    )
    seconds: float = setting(40.0, None, "how long each run offers load")
    burst_every: float = setting(2.0, None, "seconds between interactive bursts")
    burst_size: int = setting(8, None, "interactive requests in a burst")
    burst_spread: float = setting(0.2, None, "a burst arrives within this many seconds")
    batch_load: float = setting(
        1.5, None, "batch offered, as a multiple of what the engines prefill"
    )
    measure_seconds: float = setting(20.0, None, "with --engine vllm: measuring the engines")
    time_scale: float = setting(1.0, None, "the mock GPUs' time scale")
    timeout: float = setting(60.0, None, "a client gives up on a request after this long")
    seed: int = setting(11, None, "seed of the planned traffic")
    json: str = setting("", None, "write the figures to this file")


def bursts(settings: Settings, fleet: Fleet) -> list[PlannedRequest]:
    """The interactive bursts: `burst_size` payments each `burst_every` seconds."""
    interactive = next(c for c in fleet.callers if c.tier == "p0")
    rng = random.Random(settings.seed)
    requests = []
    at = settings.burst_every / 2
    while at < settings.seconds:
        for _ in range(settings.burst_size):
            when = at + rng.uniform(0, settings.burst_spread)
            requests.append(PlannedRequest(when, interactive, draw_prompt_tokens(interactive, rng)))
        at += settings.burst_every
    return sorted(requests, key=lambda request: request.at)


def backlog(settings: Settings, fleet: Fleet) -> list[PlannedRequest]:
    """The batch: P2's prompts at `batch_load` times what the engines prefill."""
    batch = next(c for c in fleet.callers if c.tier == "p2")
    rate = settings.batch_load * fleet.capacity_tokens_per_second / batch.mean_prompt()
    return plan(rate, settings.seconds, settings.seed + 1, (batch,))


def configuration(settings: Settings, fleet: Fleet) -> dict:
    """What a platform team sets for this mix: the fleet's capacity and seats, the tiers'
    priorities sent to the engines, and batch kept out of the seats the bursts need and to
    prompts that do not stall the engine's steps."""
    seats = settings.seats * settings.replicas
    return {
        "fleet": {
            "capacity_tokens_per_second": fleet.capacity_tokens_per_second,
            "max_concurrency": seats,
        },
        "engine": {"send_priority": True},
        # Batch is most of the tokens, the bursts most of the hurry: batch gets the larger
        # share of the budget, the bursts the seats.
        "tiers": {
            "p0": {"share": 0.30},
            "p1": {"share": 0.05},
            "p2": {
                "share": 0.65,
                "shed_above_inflight": 1 - settings.interactive_seats / settings.seats,
                # As in the sale: no batch prompt whose prefill stalls the engine's steps
                # for long (the 20 000-32 000-token documents, scaled).
                "max_prompt_tokens": 8192 // fleet.prompt_scale,
            },
        },
        "controller": {"floors": {"p0": 0.2, "p1": 0.05}, "ceilings": {"p2": 0.8}},
    }


def main(settings: Settings) -> int:
    stop_on_sigterm()
    if settings.engine not in ("mock", "vllm"):
        raise SystemExit(f"--engine is mock or vllm, not {settings.engine!r}")
    if not 0 < settings.interactive_seats < settings.seats:
        raise SystemExit("--interactive-seats is more than 0 and fewer than --seats")
    work = Path(tempfile.mkdtemp(prefix="qos-mix-"))
    with contextlib.ExitStack() as started:
        try:
            if settings.engine == "vllm":
                fleet = fleets.real_engines(
                    settings.replicas, work, started, settings.measure_seconds, settings.seats
                )
            else:
                fleet = fleets.mocks(settings.replicas, settings.time_scale, True)
            outcomes = _runs(settings, fleet, work)
        except StackError as error:
            print(f"the stack did not start: {error}")
            return 1
    _report(settings, fleet, outcomes)
    print(f"(logs in {work})")
    return 0


def _runs(settings: Settings, fleet: Fleet, work: Path) -> dict[str, list[Outcome]]:
    interactive, batch = bursts(settings, fleet), backlog(settings, fleet)
    both = sorted(interactive + batch, key=lambda request: request.at)
    print(
        f"{fleet.description}: {len(interactive)} interactive requests in bursts of "
        f"{settings.burst_size} every {settings.burst_every:g} s, {len(batch)} batch "
        f"requests ({settings.batch_load:g}x what the engines prefill), {settings.seconds:g} s",
        flush=True,
    )
    options = StackOptions.on_free_ports(
        work,
        replicas=settings.replicas,
        time_scale=settings.time_scale,
        mock_args=(*MOCK_ARGS, "--max-num-seqs", str(settings.seats)),
        sidecar_args=("--log-level", "WARNING", *fleet.sidecar_args),
        **fleet.stack_overrides,
    )
    outcomes: dict[str, list[Outcome]] = {}
    with Stack(options) as stack:
        stack.config.set(configuration(settings, fleet))
        for caller in fleet.callers:
            stack.config.tenant(caller.tenant, caller.tier, caller.api_key)
        port, admin_port = free_port(), free_port()
        plain = envoy_config.without_qos(stack.envoy_config(port, admin_port))
        stack.processes.append(start_envoy(plain, work, admin_port, name="envoy-no-qos"))
        plain_url = f"http://127.0.0.1:{port}"
        for run, url, requests in (
            (ALONE, plain_url, interactive),
            (ALONE_QOS, stack.envoy_url, interactive),
            (NO_QOS, plain_url, both),
            (QOS, stack.envoy_url, both),
        ):
            print(f"[{run}] offering load through {url} ...", flush=True)
            outcomes[run] = asyncio.run(offer(url, requests, settings.timeout))
            wait_until_idle(stack.engine_urls, within=300)
    return outcomes


def _report(settings: Settings, fleet: Fleet, outcomes: dict[str, list[Outcome]]) -> None:
    ttft_slo_ms = report.ttft_targets()
    summaries = {run: report.summarize(found, ttft_slo_ms) for run, found in outcomes.items()}
    print()
    print(report.table(summaries))
    for run, found in outcomes.items():
        if said := report.shed_reasons(found):
            print(f"{run}: shed as {said}")
    told = comebacks(outcomes[QOS])
    for line in told_lines(QOS, told):
        print(line)
    print(
        "\n| run | interactive TTFT p50 | p99 | p99 / alone | batch served | "
        "llm-d (A100): p99 | p99 / alone |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    figures = {}
    for run, summary in summaries.items():
        p50, p99 = summary["p0"]["ttft_p50_ms"], summary["p0"]["ttft_p99_ms"]
        alone = summaries[BASELINE[run]]["p0"]["ttft_p99_ms"]
        ratio = p99 / alone if p99 and alone else None
        figures[run] = {"p50_ms": p50, "p99_ms": p99, "p99_ratio": ratio}
        batch = summary["p2"]
        served = f"{batch['served']} of {batch['offered']}" if batch["offered"] else "-"
        print(
            f"| {run} | {_ms(p50)} | {_ms(p99)} | {_ratio(ratio)} | {served} | "
            f"{LLM_D[run]:g} ms | {LLM_D[run] / LLM_D[ALONE]:.1f}x |"
        )
    if settings.json:
        document = {
            "settings": asdict(settings),
            "fleet": fleet.description,
            "capacity_rps": fleet.capacity_rps,
            "runs": summaries,
            "interactive_ttft": figures,
            "llm_d_p99_ms": LLM_D,
            "comebacks": told,
        }
        Path(settings.json).write_text(json.dumps(document, indent=1))
        print(f"figures: {settings.json}")


def _ms(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"
