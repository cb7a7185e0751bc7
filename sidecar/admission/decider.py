"""Admission: identity → tier, body checks and guards, one token-bucket call → decision."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as redis

from sidecar.admission.identity import Identity, IdentityResolver, Unauthenticated
from sidecar.config.schema import Mode, Tier, TierConfig
from sidecar.config.store import Snapshot
from sidecar.limiter.buckets import BucketSpec, Limiter, tenant_bucket_key, tier_bucket_key
from sidecar.openai_api.prompt import PromptCounter
from sidecar.openai_api.request import (
    CompletionRequest,
    Endpoint,
    InvalidRequest,
    parse_completion_request,
)
from sidecar.openai_api.validate import validate
from sidecar.overload.shedding import SheddingState, overload_refusal
from sidecar.policy.decision import Admit, Decision, RequestView, Respond
from sidecar.policy.fallbacks import ResponseShape
from sidecar.policy.guards import apply_guards
from sidecar.policy.refusals import Reason, Refusal
from sidecar.policy.responses import respond

log = logging.getLogger(__name__)

INTERNAL_PREFIX = "x-qos-"


class AdmissionDecider:
    def __init__(
        self,
        snapshot: Callable[[], Snapshot],  # the configuration in force
        identity: IdentityResolver,
        limiter: Limiter,
        count_prompt: PromptCounter,
        shedding: Callable[[], SheddingState] = SheddingState,
    ) -> None:
        self._snapshot = snapshot
        self._identity = identity
        self._limiter = limiter
        self._count_prompt = count_prompt
        self._shedding = shedding

    async def decide(self, request: RequestView) -> Decision:
        snapshot = self._snapshot()
        decision = await self._decide(request, snapshot)
        if isinstance(decision, Respond) and snapshot.mode.mode is Mode.SHADOW:
            # Shadow: the decision is made and counted, the request goes through untouched.
            tier = Tier(decision.tier) if decision.tier else snapshot.config.identity.default_tier
            return _tagged(request, tier.value, "shadow", None, f"shadow_{decision.reason}")
        return decision

    async def _decide(self, request: RequestView, snapshot: Snapshot) -> Decision:
        shape: ResponseShape | None = None
        tier_config: TierConfig | None = None
        identity: Identity | None = None
        try:
            identity = await self._resolve(request, snapshot)
            tier_config = snapshot.config.tiers[identity.tier]
            endpoint = Endpoint.for_path(request.path)
            if endpoint is Endpoint.OTHER or request.method != "POST":
                return self._admit(request, identity)  # documented pass-through
            completion = _parse(endpoint, request.body)
            shape = ResponseShape(
                endpoint, completion.stream, completion.include_usage, completion.model
            )
            return await self._admit_completion(request, snapshot, identity, completion)
        except Refusal as refusal:
            tier_name = identity.tier.value if identity else ""
            return respond(refusal, shape, tier_config, tier_name)

    async def _resolve(self, request: RequestView, snapshot: Snapshot) -> Identity:
        try:
            return await self._identity.resolve(request.headers, snapshot)
        except Unauthenticated:
            raise Refusal(
                Reason.UNAUTHENTICATED,
                "A valid API key is required: send it as 'Authorization: Bearer <key>'.",
            ) from None

    async def _admit_completion(
        self,
        request: RequestView,
        snapshot: Snapshot,
        identity: Identity,
        completion: CompletionRequest,
    ) -> Admit:
        tier = identity.tier
        tier_config = snapshot.config.tiers[tier]
        prompt_tokens = self._count_prompt(completion.body)
        guarded = apply_guards(completion, tier_config, tier.value, prompt_tokens)
        overload = overload_refusal(tier, snapshot, self._shedding())
        if overload is not None:  # decided without Redis
            raise Refusal(overload, f"Tier {tier.value} is shed: {overload.value}.")
        cost = prompt_tokens * tier_config.weight
        buckets = self._buckets(snapshot, identity)
        try:
            verdict = await self._limiter.acquire(cost, buckets)
        except redis.RedisError as error:
            # Budgets are shared through Redis; without it, admit rather than refuse all.
            log.warning("limiter unavailable, admitting: %s", error)
            return self._admit(request, identity, guarded, reason="limiter_unavailable")
        if not verdict.allowed:
            refused = buckets[verdict.refused or 0]
            if verdict.retry_after is None:
                raise Refusal(
                    Reason.COST_EXCEEDS_BURST,
                    f"This request costs {cost:.0f} budget tokens, more than the "
                    f"{refused.burst:.0f} its budget can ever hold. Shorten the prompt.",
                )
            if verdict.refused and verdict.refused > 0:  # the tenant's own bucket
                raise Refusal(
                    Reason.TENANT_RATE_LIMITED,
                    f"Rate limit reached for tenant {identity.tenant_label}.",
                    retry_after=verdict.retry_after,
                )
            if tier_config.sheddable:
                raise Refusal(
                    Reason.SHED_TIER_BUDGET,
                    "Tier budget exhausted.",
                    retry_after=verdict.retry_after,
                )
            return self._admit(request, identity, guarded, reason="admitted_over_budget")
        return self._admit(request, identity, guarded)

    @staticmethod
    def _buckets(snapshot: Snapshot, identity: Identity) -> list[BucketSpec]:
        tier = identity.tier
        config = snapshot.config
        rate = config.tier_rate(tier)
        buckets = [
            BucketSpec(tier_bucket_key(tier.value), rate, rate * config.tiers[tier].burst_seconds)
        ]
        tenant = snapshot.tenants.get(identity.tenant or "")
        if tenant is not None and tenant.rate_tokens_per_second is not None:
            tenant_rate = tenant.rate_tokens_per_second
            buckets.append(
                BucketSpec(
                    tenant_bucket_key(tier.value, identity.tenant_label),
                    tenant_rate,
                    tenant_rate * tenant.burst_seconds,
                )
            )
        return buckets

    @staticmethod
    def _admit(
        request: RequestView,
        identity: Identity,
        body: dict[str, Any] | None = None,
        reason: str = "admitted",
    ) -> Admit:
        return _tagged(request, identity.tier.value, identity.tenant_label, body, reason)


def _tagged(
    request: RequestView, tier: str, tenant: str, body: dict[str, Any] | None, reason: str
) -> Admit:
    """Admit with the sidecar's tags; internal headers a client sent never go upstream."""
    tags = {"x-qos-tier": tier, "x-qos-tenant": tenant}
    spoofed = tuple(
        name for name in request.headers if name.startswith(INTERNAL_PREFIX) and name not in tags
    )
    replacement = None
    if body is not None:
        replacement = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return Admit(
        set_headers=tags, remove_headers=spoofed, replace_body=replacement, reason=reason, tier=tier
    )


def _parse(endpoint: Endpoint, body: bytes | None) -> CompletionRequest:
    try:
        completion = parse_completion_request(endpoint, body or b"")
        validate(completion)
    except InvalidRequest as error:
        raise Refusal(Reason.INVALID_REQUEST, error.message, param=error.param) from None
    return completion
