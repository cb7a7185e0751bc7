"""What each decision adds to the sidecar's metrics: counted once, as it is made."""

from __future__ import annotations

from sidecar.metrics import SidecarMetrics
from sidecar.request.policy.decision import Admission, Admitted, Decision, Respond


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
