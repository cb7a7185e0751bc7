"""`bench promo --load-tool vllm`: the sale offered by `vllm bench serve` (field_tool.py)
instead of this project's load generator.

Each tier's tool sends ShareGPT's prompts at the tier's share of the requests (P0 15 %,
P1 45 %, P2 40 %, as the sale's mix), asking for the mix's answer lengths (48 tokens for
P0, 128 for the others), at `--overload` times what the fleet serves of them. What the
fleet serves is measured first by the tool itself, kept at twice the engines' seats
straight at the engines (no gateway), and the gateway is configured with it as it is
with the sale's own mix. ShareGPT's prompts are short (a few hundred tokens against the
mix's 2 600): the engines' seats, not their prefill, run out first, so the mock GPUs get
fewer seats here (`SEATS`), which keeps the requests a second within what this
machine's load tools can send."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sidecar.config.base import Tier
from sidecar.config.schema import QosConfig
from sidecar.tooling.benchmarks import field_tool, report
from sidecar.tooling.benchmarks.field_tool import Target, TierLoad
from sidecar.tooling.benchmarks.fleet import Fleet
from sidecar.tooling.benchmarks.load import Outcome
from sidecar.tooling.benchmarks.traffic import mean_prompt_tokens
from sidecar.tooling.engine import vllm, workspace

# The mock GPUs' seats (--max-num-seqs) in this sale.
SEATS = 16
# Requests the measurement sends each engine, in seats: long enough to fill and drain.
MEASURED_SEATS = 8


@dataclass(frozen=True)
class FieldSale:
    fleet: Fleet
    target: Target  # its base URL set for each run
    mean_prompt: float  # ShareGPT's, in the gateway's estimated tokens
    work: Path
    overload: float
    seconds: float
    seed: int
    seats: int  # each engine's
    loads: tuple[TierLoad, ...] = ()  # once measured

    @classmethod
    def planned(
        cls, fleet: Fleet, overload: float, seconds: float, seed: int, work: Path, seats: int
    ) -> FieldSale:
        conversations = field_tool.complete_conversations(field_tool.sharegpt_path())
        dataset = work / "sharegpt.json"  # the whole conversations, for the tool to read
        dataset.write_text(json.dumps(conversations), encoding="utf-8")
        mean = field_tool.mean_prompt_tokens(conversations)
        target = Target("", vllm.SERVED_MODEL, vllm.model(), dataset, workspace.python())
        return cls(fleet, target, mean, work, overload, seconds, seed, seats)

    def measured(self, engine_urls: Sequence[str]) -> tuple[FieldSale, Fleet]:
        """What the engines serve of ShareGPT's requests, measured by the tool at twice
        their seats; the sale sized to it, and the fleet as the gateway is to count it."""
        callers = self.fleet.callers
        output = round(sum(c.share * c.max_tokens for c in callers) / sum(c.share for c in callers))
        prompts = MEASURED_SEATS * self.seats
        probes = [
            TierLoad(f"measure-{index}", "", math.inf, prompts, 1e9, "", self.seed, output)
            for index, _ in enumerate(engine_urls)
        ]
        targets = [dataclasses.replace(self.target, base_url=url) for url in engine_urls]
        where = self.work / "measure"
        where.mkdir(parents=True, exist_ok=True)
        print("measuring what the engines serve of ShareGPT with vllm bench serve ...", flush=True)
        extra = ("--max-concurrency", str(2 * self.seats))
        results = field_tool.drive(probes, targets, where, 600, extra)
        capacity = sum(result["request_throughput"] for result in results.values())
        tokens = capacity * self.mean_prompt
        print(
            f"they serve {capacity:.2f} requests/s of it (prompts of {self.mean_prompt:,.0f} "
            f"tokens on average: {tokens:,.0f} prompt tokens/s)",
            flush=True,
        )
        config = QosConfig()
        by_tier = {caller.tier: caller for caller in callers}
        loads = field_tool.tier_loads(
            {tier: caller.share for tier, caller in by_tier.items()},
            self.overload * tokens,
            self.mean_prompt,
            self.seconds,
            self.seed,
            {tier: caller.api_key for tier, caller in by_tier.items()},
            {tier: config.slo.targets[Tier(tier)].ttft_ms for tier in by_tier},
            {tier: config.tiers[Tier(tier)].message() for tier in by_tier},
            {tier: caller.max_tokens for tier, caller in by_tier.items()},
        )
        offered = ", ".join(f"{load.tier.upper()} {load.rate:.1f}/s" for load in loads)
        print(f"offering {self.overload:g}x: {offered} for {self.seconds:g} s", flush=True)
        # The gateway counts capacity in prompt tokens a second: ShareGPT's, in the fleet.
        fleet = dataclasses.replace(self.fleet, capacity_rps=tokens / mean_prompt_tokens(callers))
        return dataclasses.replace(self, loads=tuple(loads)), fleet

    def run(self, run: str, url: str) -> tuple[list[Outcome], dict[str, dict]]:
        """One run through `url`: the requests as this harness reads them, and the
        tool's own figures per tier."""
        where = self.work / run.replace(" ", "-").replace(",", "")
        where.mkdir(parents=True, exist_ok=True)
        print(f"[{run}] {len(self.loads)} vllm bench serve processes, logs in {where}", flush=True)
        targets = [dataclasses.replace(self.target, base_url=url)] * len(self.loads)
        results = field_tool.drive(self.loads, targets, where, self.seconds * 10 + 300)
        outcomes = [o for load in self.loads for o in field_tool.outcomes(load, results[load.tier])]
        figures = {tier: field_tool.tool_figures(results[tier]) for tier in report.TIERS}
        return outcomes, figures
