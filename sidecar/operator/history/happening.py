"""The "what is happening" line: which tiers are shed, why and since when, and which are
served by another pool's model instead, in plain words, from the window's newest seconds.
Pure: the page's data in, short facts out (the page writes the times in its viewer's
clock)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.refusals import Reason

RECENT_SECONDS = 5  # a tier is "being shed" if it shed in its last 5 s
GAP_SECONDS = 10  # a run of shedding goes on across quiet seconds up to this long

WORDS: dict[str, str] = {  # by Reason, a str
    Reason.SHED_KV_WATERMARK: "KV cache low",
    Reason.SHED_INFLIGHT: "too many requests in flight",
    Reason.SHED_TIER_BUDGET: "over the tier's budget",
    Reason.SHED_FAIR_SHARE: "tenants over their fair share",
    Reason.SHED_QUEUE_FULL: "the queue is full",
    Reason.SHED_QUEUE_TIMEOUT: "waited out its time in the queue",
    Reason.SHED_QUEUE_FORESEEN: "its wait in the queue foreseen too long",
    Reason.SHED_FIRST_TOKEN_FORESEEN: "its first token foreseen past its target",
    Reason.SHED_NO_REPORTS: "no load reports from the GPUs",
    Reason.SHED_CORE_ONLY: "protect transactions only (core-only mode)",
    Reason.SHED_FORCED: "shed by hand",
}


def happening(series: Mapping[str, Any], lines: Mapping[str, Any]) -> dict[str, Any]:
    """`series`: Window.series(); `lines`: per pool and tier, the thresholds in force
    (history/page.py). Returns the mode, since when it holds, and each tier being shed:
    its pool, tier, main reason (code, words and the figures behind it), since when
    and how many a second."""
    now, start = series.get("now"), series.get("start")
    if now is None or start is None:
        return {"mode": None, "mode_since": None, "shed": []}
    mode = series["mode"]
    current = mode[-1] if mode and mode[-1] is not None else None
    shed = []
    for pool, data in series["pools"].items():
        for tier, counts in data["tiers"].items():
            found = _shed(counts["shed"], start)
            if found is None:
                continue
            reason, since, per_second = found
            figures = _figures(reason, tier, data, lines.get(pool, {}).get(tier, {}))
            shed.append(
                {
                    "pool": pool,
                    "tier": tier,
                    "reason": reason,
                    "words": _words(reason),
                    "figures": figures,
                    "since": since,
                    "whole_window": since == start,
                    "per_second": round(per_second, 1),
                }
            )
    return {
        "mode": current,
        "mode_since": _since(mode, start, current),
        "shed": shed,
        "overflow": _overflowing(series["pools"], lines),
    }


def _overflowing(pools: Mapping[str, Any], lines: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each tier a pool sheds that another pool's model serves lately, and how many a
    second."""
    moved = []
    for pool, data in pools.items():
        for tier, counts in data["tiers"].items():
            for source, column in counts.get("overflowed_in", {}).items():
                recent = sum(column[-RECENT_SECONDS:])
                if recent > 0:
                    moved.append(
                        {
                            "pool": source,
                            "tier": tier,
                            "to": pool,
                            "model": lines.get(pool, {}).get(tier, {}).get("model"),
                            "per_second": round(recent / RECENT_SECONDS, 1),
                        }
                    )
    return moved


def _shed(by_reason: Mapping[str, Sequence[float]], start: int) -> tuple[str, int, float] | None:
    """The main shed reason of the last seconds, when the run of shedding began, and the
    rate over the last seconds; None if the tier shed nothing lately."""
    reasons = {r: v for r, v in by_reason.items() if r.startswith("shed_")}
    if not reasons:
        return None
    recent = {r: sum(v[-RECENT_SECONDS:]) for r, v in reasons.items()}
    reason = max(recent, key=lambda r: recent[r])
    if recent[reason] <= 0:
        return None
    totals = [sum(column) for column in zip(*reasons.values(), strict=True)]
    first = len(totals) - 1
    quiet = 0
    for index in range(len(totals) - 1, -1, -1):
        if totals[index] > 0:
            first, quiet = index, 0
        else:
            quiet += 1
            if quiet > GAP_SECONDS:
                break
    return reason, start + first, sum(recent.values()) / RECENT_SECONDS


def _since(column: Sequence[Any], start: int, value: Any) -> int | None:
    """The first second of the run of `value` that ends the column (unknown seconds
    inside it do not end the run)."""
    if value is None:
        return None
    first = len(column) - 1
    for index in range(len(column) - 1, -1, -1):
        if column[index] == value:
            first = index
        elif column[index] is not None:
            break
    return start + first


def _figures(reason: str, tier: str, pool: Mapping[str, Any], lines: Mapping[str, Any]) -> str:
    """The figures behind a load rule, as the page's last second has them."""
    name = tier.upper()
    if reason == Reason.SHED_KV_WATERMARK:
        free = _last(pool["projected_free_kv"]) or _last(pool["free_kv"])
        line = lines.get("shed_below_free_kv")
        if free is not None and line is not None:
            return f"{100 * free:.0f} % free, {name}'s watermark is {100 * line:.0f} %"
    if reason == Reason.SHED_INFLIGHT:
        in_flight, limit = _last(pool["in_flight"]), _last(pool["max_concurrency"])
        line = lines.get("shed_above_inflight")
        if in_flight is not None and limit and line is not None:
            return f"{in_flight:.0f} of {limit:.0f} in flight, {name}'s line is {100 * line:.0f} %"
    return ""


def _last(column: Sequence[Any]) -> Any:
    return next((value for value in reversed(column) if value is not None), None)


def _words(reason: str) -> str:
    # A reason a newer sidecar added and this one does not know: its code, readable.
    return WORDS.get(reason) or reason.removeprefix("shed_").replace("_", " ")
