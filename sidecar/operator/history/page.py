"""What the duty team's page draws, in one document: the window's series, the lines they
are read against (watermarks, the concurrency guard's rules, SLO targets, from the
configuration in force), the events on the time axis (switches of the mode, the
controller's moves) and the "what is happening" summary. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sidecar.config.audit import AuditEntry
from sidecar.config.base import Tier
from sidecar.config.snapshot import Snapshot
from sidecar.operator.history.happening import happening


def lines(snapshot: Snapshot) -> dict[str, dict[str, dict[str, float | str | None]]]:
    """Per pool and tier: where the tier is shed (free KV below, in-flight share above),
    its first-token SLO, and the model that serves what other pools overflow to it."""
    return {
        pool.name: {
            tier.value: {
                "shed_below_free_kv": pool.tiers[tier].shed_below_free_kv,
                "shed_above_inflight": pool.tiers[tier].shed_above_inflight,
                "ttft_slo_ms": pool.slo[tier].ttft_ms,
                "model": pool.model or None,
            }
            for tier in Tier
        }
        for pool in snapshot.pools
    }


def events(
    switches: Iterable[AuditEntry], adjustments: Iterable[Mapping[str, Any]], since: float
) -> list[dict[str, Any]]:
    """The events from `since` on, oldest first: every change (a switch of the mode, a
    tenant, the configuration), and every controller move (with the pool it moved)."""
    found: list[dict[str, Any]] = [
        {"at": s.at, "kind": "switch" if s.kind == "mode" else "change", "text": _said(s)}
        for s in switches
        if s.at >= since
    ]
    for move in adjustments:
        at = move.get("at")
        if isinstance(at, int | float) and at >= since:
            found.append(
                {
                    "at": at,
                    "kind": "controller",
                    "pool": move.get("pool"),
                    "text": move.get("reason", ""),
                }
            )
    return sorted(found, key=lambda event: event["at"])


def build(
    series: Mapping[str, Any], in_force: Mapping[str, Any], on_axis: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        **series,
        "lines": in_force,
        "events": on_axis,
        "happening": happening(series, in_force),
    }


def _said(entry: AuditEntry) -> str:
    return f"{entry.what} by {entry.by} via {entry.via}"
