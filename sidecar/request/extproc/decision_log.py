"""The decision log: one JSON line a decision (all of them, or a sample), on the logger
`qos.decisions`, so that a refusal can be explained afterwards from the log store: who
sent it, its tier, pool and route, what was decided and why, what it cost, how long it
waited. Off unless --decision-log-sample says what share of decisions to write."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from sidecar.request.policy.decision import Admit, Decision

log = logging.getLogger("qos.decisions")


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
