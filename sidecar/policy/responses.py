"""The one place a Refusal becomes an HTTP answer."""

from __future__ import annotations

import math

from sidecar.config.schema import FallbackKind, TierConfig
from sidecar.policy.decision import Respond
from sidecar.policy.fallbacks import ResponseShape, completion_fallback, error_body
from sidecar.policy.refusals import Reason, Refusal

# reason → (HTTP status, OpenAI error type, OpenAI error code)
_ERRORS = {
    Reason.INVALID_REQUEST: (400, "invalid_request_error", None),
    Reason.UNAUTHENTICATED: (401, "invalid_request_error", "invalid_api_key"),
    Reason.MODEL_NOT_FOUND: (404, "invalid_request_error", "model_not_found"),
    Reason.PROMPT_TOO_LONG: (400, "invalid_request_error", "prompt_too_long"),
    Reason.COST_EXCEEDS_BURST: (400, "invalid_request_error", "cost_exceeds_burst"),
    Reason.TENANT_RATE_LIMITED: (429, "rate_limit_exceeded", "rate_limit_exceeded"),
}
# Every shed, whatever its cause, answers alike: the tier's fallback, or this error.
_SHED_ERROR = (429, "rate_limit_exceeded", "load_shedding")


def respond(
    refusal: Refusal,
    shape: ResponseShape | None,
    tier: TierConfig | None,
    tier_name: str = "",
) -> Respond:
    headers = {"x-qos-decision": refusal.reason.value}
    if tier_name:
        headers["x-qos-tier"] = tier_name
    if refusal.reason.is_shed and tier is not None:
        headers["retry-after"] = str(tier.retry_after_seconds)
        if tier.fallback is FallbackKind.COMPLETION and shape is not None:
            body, content_type = completion_fallback(shape, tier.message())
            headers["content-type"] = content_type
            return Respond(200, body, refusal.reason.value, headers, tier_name)
        message = tier.message()
    else:
        message = refusal.message
        if refusal.retry_after is not None:
            headers["retry-after"] = str(max(1, math.ceil(refusal.retry_after)))
    status, error_type, code = _SHED_ERROR if refusal.reason.is_shed else _ERRORS[refusal.reason]
    if refusal.reason is Reason.UNAUTHENTICATED:
        headers["www-authenticate"] = "Bearer"
    headers["content-type"] = "application/json"
    body = error_body(message, error_type, code, refusal.param)
    return Respond(status, body, refusal.reason.value, headers, tier_name)
