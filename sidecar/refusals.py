"""The one error type of admission: why a request is not sent upstream."""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    INVALID_REQUEST = "invalid_request"
    UNAUTHENTICATED = "unauthenticated"
    MODEL_NOT_FOUND = "model_not_found"
    ROUTE_NOT_FOUND = "route_not_found"  # not a route the gateway serves (deny by default)
    PROMPT_TOO_LONG = "prompt_too_long"
    COST_EXCEEDS_BURST = "cost_exceeds_burst"
    TENANT_RATE_LIMITED = "tenant_rate_limited"
    SHED_TIER_BUDGET = "shed_tier_budget"
    # Over its fair share of a contended tier: the rest is kept for the tier's others.
    SHED_FAIR_SHARE = "shed_fair_share"
    SHED_KV_WATERMARK = "shed_kv_watermark"
    SHED_INFLIGHT = "shed_inflight"
    SHED_QUEUE_FULL = "shed_queue_full"
    SHED_QUEUE_TIMEOUT = "shed_queue_timeout"
    # Answered at once: its wait for a slot was foreseen to outlast what it may wait.
    SHED_QUEUE_FORESEEN = "shed_queue_foreseen"
    # Answered at once: its first token was foreseen past its TTFT target even unqueued.
    SHED_FIRST_TOKEN_FORESEEN = "shed_first_token_foreseen"
    SHED_NO_REPORTS = "shed_no_reports"
    SHED_CORE_ONLY = "shed_core_only"
    SHED_FORCED = "shed_forced"

    @property
    def is_shed(self) -> bool:
        """Load shedding: answered with the tier's fallback, not an error."""
        return self.value.startswith("shed_")


class Refusal(Exception):
    def __init__(
        self,
        reason: Reason,
        message: str,
        *,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.param = param
        self.retry_after = retry_after


def shed(reason: Reason, tier: str, retry_after: float | None = None) -> Refusal:
    """A shed of `tier` (its answer is the tier's fallback, not this message);
    `retry_after`: the seconds after which the tier is foreseen admitted again, if any."""
    return Refusal(reason, f"Tier {tier} is shed: {reason.value}.", retry_after=retry_after)
