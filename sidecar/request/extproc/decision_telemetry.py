"""What each decision leaves behind, once it is made: its count in the sidecar's metrics,
and its line in the decision log. The log: one JSON line a decision (all of them, or a
sample), on the logger `qos.decisions`, so that a refusal can be explained afterwards
from the log store: who sent it, its tier, pool and route, what was decided and why,
what it cost, how long it waited. Off unless --decision-log-sample says what share of
decisions to write. The trace's attributes are the log's fields (tracing.py)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from sidecar.metrics import SidecarMetrics
from sidecar.request.policy.decision import Admission, Admit, Admitted, Decision, Respond

log = logging.getLogger("qos.decisions")


def count_decision(metrics: SidecarMetrics, decision: Decision, seconds: float) -> None:
    metrics.decision_seconds.observe(seconds)
    if isinstance(decision, Respond):
        _answered_here(metrics, decision)
    else:
        _admitted(metrics, decision.record)


def _admitted(metrics: SidecarMetrics, record: Admission) -> None:
    tier, pool = record.tier or "none", record.pool or "none"
    metrics.child(metrics.decisions, tier, "admit", record.label, pool).inc()
    if record.cost is not None:
        metrics.child(metrics.admitted_cost, record.tier, record.route).inc(record.cost)
    if record.overflowed_from:
        moved = (record.overflowed_from, record.pool, record.tier)
        metrics.child(metrics.overflowed, *moved).inc()
        metrics.child(metrics.overflowed_tokens, *moved).inc(record.cost or 0.0)
    if record.reason is Admitted.DECIDER_ERROR:
        metrics.decider_errors.inc()
    if record.queue_wait is not None:
        metrics.child(metrics.queue_wait_seconds, record.tier).observe(record.queue_wait)
        if record.foreseen_wait is not None:
            metrics.child(metrics.queue_wait_error, record.tier, record.pool).observe(
                record.queue_wait - record.foreseen_wait
            )


def _answered_here(metrics: SidecarMetrics, respond: Respond) -> None:
    tier, pool = respond.tier or "none", respond.pool or "none"
    metrics.child(metrics.decisions, tier, "respond", respond.label, pool).inc()
    if respond.waited is not None:
        metrics.child(metrics.shed_after_wait, tier, respond.label, pool).observe(respond.waited)


def decision_fields(decision: Decision, seconds: float) -> dict[str, Any]:
    """What a decision was, in the names the log and the trace share."""
    if isinstance(decision, Admit):
        record = decision.record
        fields: dict[str, Any] = {
            "outcome": "admit",
            "reason": record.label,
            "tier": record.tier,
            "tenant": record.tenant,
            "pool": record.pool,
            "route": record.route,
        }
        if record.cost is not None:
            fields["cost_tokens"] = round(record.cost, 3)
        if record.queue_wait is not None:
            fields["queue_wait_ms"] = round(record.queue_wait * 1000, 3)
        if record.overflowed_from:
            fields["overflowed_from"] = record.overflowed_from
    else:
        fields = {
            "outcome": "respond",
            "reason": decision.label,
            "status": decision.status,
            "tier": decision.tier,
            "tenant": decision.tenant,
            "pool": decision.pool,
            "route": decision.route,
        }
        if decision.waited is not None:
            fields["queue_wait_ms"] = round(decision.waited * 1000, 3)
    fields["decided_ms"] = round(seconds * 1000, 3)
    return fields


class DecisionLog:
    def __init__(self, sample: float, chance: Callable[[], float] = random.random) -> None:
        self._sample = sample  # the share of decisions written: 0 none, 1 all
        self._chance = chance

    def __call__(self, decision: Decision, seconds: float) -> None:
        if self._sample <= 0 or (self._sample < 1 and self._chance() >= self._sample):
            return
        log.info("decision", extra=decision_fields(decision, seconds))
