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
    metrics.decisions.labels(tier, "admit", record.label, pool).inc()
    if record.cost is not None:
        metrics.admitted_cost.labels(record.tier, record.route).inc(record.cost)
    if record.overflowed_from:
        moved = (record.overflowed_from, record.pool, record.tier)
        metrics.overflowed.labels(*moved).inc()
        metrics.overflowed_tokens.labels(*moved).inc(record.cost or 0.0)
    if record.reason is Admitted.DECIDER_ERROR:
        metrics.decider_errors.inc()
    if record.queue_wait is not None:
        metrics.queue_wait_seconds.labels(record.tier).observe(record.queue_wait)
        if record.foreseen_wait is not None:
            metrics.queue_wait_error.labels(record.tier, record.pool).observe(
                record.queue_wait - record.foreseen_wait
            )


def _answered_here(metrics: SidecarMetrics, respond: Respond) -> None:
    tier, pool = respond.tier or "none", respond.pool or "none"
    metrics.decisions.labels(tier, "respond", respond.label, pool).inc()
    if respond.waited is not None:
        metrics.shed_after_wait.labels(tier, respond.label, pool).observe(respond.waited)
