"""Per-tier figures of a run, the table comparing runs, and the run over time."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping

from sidecar.config.base import Tier
from sidecar.config.schema import QosConfig
from sidecar.tooling.benchmarks.load import ERROR, SERVED, SHED, Outcome

TIERS = ("p0", "p1", "p2")


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (nearest rank) in milliseconds; None without values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1] * 1000


def ttft_targets() -> dict[str, float]:
    """Each tier's TTFT target in ms, the sidecar's default SLO: what "within SLO" means."""
    targets = QosConfig().slo.targets
    return {tier: targets[Tier(tier)].ttft_ms for tier in TIERS}


# A shed answered this fast was decided at once; slower, the request waited first.
FAST_SHED_SECONDS = 0.010


def shed_reasons(outcomes: Iterable[Outcome]) -> str:
    """Why the shed requests were shed, most frequent first ("" if none was)."""
    reasons = Counter(o.detail for o in outcomes if o.result == SHED)
    return ", ".join(f"{reason} {count}" for reason, count in reasons.most_common())


def shed_after_a_wait(outcomes: Iterable[Outcome]) -> str:
    """Of those, the ones shed after a wait, by tier and reason ("" if none was)."""
    waited = Counter(
        f"{o.tier} {o.detail}"
        for o in outcomes
        if o.result == SHED and o.seconds > FAST_SHED_SECONDS
    )
    return ", ".join(f"{reason} {count}" for reason, count in waited.most_common())


def summarize(
    outcomes: list[Outcome], ttft_slo_ms: Mapping[str, float] | None = None
) -> dict[str, dict[str, float | int | None]]:
    """Per tier; with the tiers' TTFT targets, the served split into within them
    (goodput) and late."""
    summary = {}
    for tier in TIERS:
        mine = [o for o in outcomes if o.tier == tier]
        served = [o for o in mine if o.result == SERVED]
        shed = [o for o in mine if o.result == SHED]
        fast = sum(o.seconds <= FAST_SHED_SECONDS for o in shed)
        good = None
        if ttft_slo_ms is not None:
            target = ttft_slo_ms[tier] / 1000
            good = sum(o.ttft is not None and o.ttft <= target for o in served)
        summary[tier] = {
            "offered": len(mine),
            "served": len(served),
            "within_slo": good,
            "late": None if good is None else len(served) - good,
            "shed": len(shed),
            "shed_fast": fast,
            "shed_after_wait": len(shed) - fast,
            "errors": sum(o.result == ERROR for o in mine),
            "ttft_p50_ms": percentile((o.ttft for o in served if o.ttft is not None), 50),
            "ttft_p99_ms": percentile((o.ttft for o in served if o.ttft is not None), 99),
            "tpot_p50_ms": percentile((o.tpot for o in served if o.tpot is not None), 50),
            "tpot_p99_ms": percentile((o.tpot for o in served if o.tpot is not None), 99),
            "shed_p50_ms": percentile((o.seconds for o in shed), 50),
            "shed_p99_ms": percentile((o.seconds for o in shed), 99),
        }
    return summary


COLUMNS = (
    ("offered", "offered", "{}"),
    ("served", "served", "{}"),
    ("within_slo", "within SLO", "{}"),
    ("late", "late", "{}"),
    ("shed_fast", "shed ≤ 10 ms", "{}"),
    ("shed_after_wait", "shed later", "{}"),
    ("errors", "errors", "{}"),
    ("ttft_p50_ms", "TTFT p50", "{:.0f} ms"),
    ("ttft_p99_ms", "TTFT p99", "{:.0f} ms"),
    ("tpot_p50_ms", "TPOT p50", "{:.0f} ms"),
    ("tpot_p99_ms", "TPOT p99", "{:.0f} ms"),
    ("shed_p50_ms", "shed p50", "{:.1f} ms"),
    ("shed_p99_ms", "shed p99", "{:.1f} ms"),
)


def table(runs: dict[str, dict[str, dict]]) -> str:
    """A Markdown table: one row per run and tier offered anything."""
    lines = [
        "| run | tier | " + " | ".join(title for _, title, _ in COLUMNS) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    for run, summary in runs.items():
        for tier in TIERS:
            row = summary[tier]
            if not row["offered"]:
                continue
            cells = ["-" if row[key] is None else form.format(row[key]) for key, _, form in COLUMNS]
            lines.append(f"| {run} | {tier.upper()} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timeline(outcomes: list[Outcome], seconds: float, step: float = 1.0) -> dict[str, list]:
    """Per `step` of planned start: each tier's served, shed and errors, and P0's TTFT p99."""
    bins = max(1, math.ceil(seconds / step))
    series: dict[str, list] = {"t": [round(i * step, 3) for i in range(bins)]}
    for tier in TIERS:
        for result in (SERVED, SHED, ERROR):
            series[f"{tier}_{result}"] = [0] * bins
        series[f"{tier}_ttft_p99_ms"] = [None] * bins
    ttfts: dict[tuple[str, int], list[float]] = {}
    for outcome in outcomes:
        index = min(bins - 1, int(outcome.at / step))
        series[f"{outcome.tier}_{outcome.result}"][index] += 1
        if outcome.ttft is not None:
            ttfts.setdefault((outcome.tier, index), []).append(outcome.ttft)
    for (tier, index), values in ttfts.items():
        series[f"{tier}_ttft_p99_ms"][index] = percentile(values, 99)
    return series
