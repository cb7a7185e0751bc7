"""One completion request on its way through admission: what it is, what it costs, where
it goes; and what it becomes as it is charged, reserved and tagged for the engine. Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sidecar.config.base import Tier
from sidecar.config.pools import DEFAULT_POOL, Pool
from sidecar.config.schema import TierConfig
from sidecar.config.store import Snapshot
from sidecar.refusals import Reason, Refusal
from sidecar.request.admission.budgets import too_big
from sidecar.request.admission.identity import Identity
from sidecar.request.admission.overflow import Overflow
from sidecar.request.admission.tagging import POOL_HEADER, USAGE_HEADER
from sidecar.request.bodies.parsed import ParsedRequest, TextForm
from sidecar.request.limiter.buckets import BucketSpec
from sidecar.request.policy.cost import Charge, Reservation
from sidecar.request.policy.decision import Admit, Decision, RequestView, Respond, admitted_as
from sidecar.request.policy.engine import EngineFields, engine_fields
from sidecar.request.policy.responses import respond


@dataclass(frozen=True)
class AdmissionRequest:
    view: RequestView
    snapshot: Snapshot
    identity: Identity
    parsed: ParsedRequest
    body: dict[str, Any] | None  # the body to forward instead, when it changed
    pool: Pool  # the pool serving the request's model
    charge: Charge  # what it costs its budgets
    max_wait: float  # seconds it may wait for admission (patience.py)
    reservation: Reservation | None = None  # what it took, when it is settled at its end
    substitute: bool = True  # its client takes an answer from another pool's model
    overflow: Overflow | None = None  # sent to this pool by the one that shed it

    @property
    def tier(self) -> Tier:
        return self.identity.tier

    @property
    def tier_config(self) -> TierConfig:
        return self.pool.tiers[self.tier]

    def refuse(self, reason: Reason, message: str = "") -> Respond:
        return self.answer(
            Refusal(reason, message or f"Tier {self.tier.value} is shed: {reason.value}.")
        )

    def answer(self, refusal: Refusal) -> Respond:
        answer = respond(refusal, self.parsed.shape, self.tier_config, self.tier.value)
        return dataclasses.replace(answer, pool=self.pool.name)

    def within(self, buckets: list[BucketSpec]) -> AdmissionRequest:
        """Reserving no more than its smallest bucket holds (the rest of its cost is owed
        when its answer is settled); refused when its prompt alone is more."""
        smallest = min(buckets, key=lambda bucket: bucket.burst)
        charge = dataclasses.replace(self.charge, ceiling=smallest.burst)
        if charge.prompt_cost > smallest.burst:
            raise too_big(self.identity, charge.prompt_cost, smallest)
        return dataclasses.replace(self, charge=charge)

    def reserved(self, buckets: list[BucketSpec]) -> AdmissionRequest:
        """With what it took from `buckets`, when its end settles it: when its tier charges
        output, or when part of its prompt was a configured estimate (media, a stored
        conversation) that the answer's usage corrects. Otherwise it was charged its
        prompt only: nothing to settle."""
        parsed = self.parsed
        if self.charge.output_weight <= 0 and not parsed.prompt.estimated_from_outside:
            return self
        reservation = Reservation(
            self.charge,
            tuple(buckets),
            parsed.shape.text is TextForm.CHAT,
            parsed.model or "",
            self.pool.name,
            self.tier,
            sized=parsed.shape.text in (TextForm.CHAT, TextForm.COMPLETION),
        )
        return dataclasses.replace(self, reservation=reservation)

    def engine(self) -> EngineFields:
        """The body and headers vLLM schedules by (the tier's priority, never the
        client's), and with pools configured the pool Envoy routes the request to."""
        changed = self.body is not None
        parsed = self.parsed
        fields = engine_fields(
            (self.body if changed else parsed.body) if parsed.json_body else None,
            changed,
            self.snapshot.config.engine.send_priority,
            self.tier_config.vllm_priority,
            parsed.body_priority,
        )
        if self.pool.name != DEFAULT_POOL:
            fields.headers[POOL_HEADER] = self.pool.name
        if self.reservation is not None and parsed.stream and parsed.usage_in_stream:
            # Envoy reads this stream's usage chunk as it passes (envoy.yaml's Lua filter).
            fields.headers[USAGE_HEADER] = "1"
        return fields


def charged(decision: Decision, request: AdmissionRequest) -> Decision:
    """The decision, its admission marked with the route and what it was charged (once:
    an admission another pool charged keeps that pool's charge)."""
    route, cost = request.parsed.kind.value, request.charge.reserved

    def mark(admit: Admit) -> Admit:
        return (
            admit if admit.cost is not None else dataclasses.replace(admit, route=route, cost=cost)
        )

    return admitted_as(decision, mark)


def pool_for(snapshot: Snapshot, model: str | None) -> Pool:
    """The pool serving `model`; a model no pool serves is answered as vLLM answers it."""
    pool = snapshot.pools.for_model(model)
    if pool is None:
        raise Refusal(
            Reason.MODEL_NOT_FOUND,
            f"The model `{model}` does not exist."
            if model
            else "This gateway serves several models: name one in `model`.",
            param="model",
        )
    return pool
