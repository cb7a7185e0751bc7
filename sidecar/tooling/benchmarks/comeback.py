"""How well a sale's sheds were told when to come back: for each shed that carried a
Retry-After, the time from its answer until its tier and pool were next admitted (the next
request of theirs the load generator sent that was served), against what it was told.
Sheds after which nothing of theirs was served again are left out."""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable

from sidecar.tooling.benchmarks.load import SERVED, SHED, Outcome

# Told within this share of the time it took: "within 50 %".
WITHIN = 0.5


def comebacks(outcomes: Iterable[Outcome]) -> dict[str, dict[str, float | int | None]]:
    """Per tier and why it was shed ("p2 shed_kv_watermark"): the sheds measured, the
    share told within WITHIN of the time until their tier was admitted again, and the
    medians of both times (seconds)."""
    outcomes = list(outcomes)
    served: dict[tuple[str, str], list[float]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.result == SERVED:
            served[outcome.tier, outcome.pool].append(outcome.at + outcome.late)
    for times in served.values():
        times.sort()
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for outcome in outcomes:
        if outcome.result != SHED or outcome.retry_after is None:
            continue
        times = served[outcome.tier, outcome.pool]
        after = bisect.bisect_left(times, outcome.answered_at)
        if after < len(times):
            took = times[after] - outcome.answered_at
            pairs[f"{outcome.tier} {outcome.detail}"].append((outcome.retry_after, took))
    return {key: _figures(found) for key, found in sorted(pairs.items())}


def _figures(pairs: list[tuple[float, float]]) -> dict[str, float | int | None]:
    within = sum(abs(told - took) <= WITHIN * took for told, took in pairs)
    return {
        "sheds": len(pairs),
        "within_share": within / len(pairs),
        "told_median_s": statistics.median(told for told, _ in pairs),
        "took_median_s": statistics.median(took for _, took in pairs),
    }


def told_lines(run: str, told: dict[str, dict[str, float | int | None]]) -> list[str]:
    """`comebacks`' figures, one line per tier and why it was shed."""
    return [
        f"{run}: {figures['sheds']} {shed} told to come back after"
        f" {figures['told_median_s']:.2f} s (median), admitted again after"
        f" {figures['took_median_s']:.2f} s; {figures['within_share']:.0%} told within 50 %"
        for shed, figures in told.items()
    ]
