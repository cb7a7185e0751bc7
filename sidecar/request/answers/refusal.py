"""The one place a Refusal becomes an HTTP answer, in the shape of the client's API: as
an error of its API, or a shed tier's fallback; with what is known of the request when it
was refused (`RefusalAnswer`: its API, route, tier, tenant and pool, learnt as admission
goes)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

from sidecar.config.base import FallbackKind, Tier
from sidecar.config.pools import Pool
from sidecar.config.schema import TierConfig, TiersConfig
from sidecar.refusals import Reason, Refusal
from sidecar.request.answers import anthropic, openai
from sidecar.request.answers.openai_responses import response_fallback
from sidecar.request.answers.sse import dumps
from sidecar.request.bodies.parsed import ResponseShape, TextForm
from sidecar.request.policy.decision import Respond
from sidecar.routes.kinds import Api

_R = Reason
# reason → (HTTP status, error type, error code), the OpenAI API's.
_OPENAI_ERRORS = {
    _R.INVALID_REQUEST: (400, "invalid_request_error", None),
    _R.UNAUTHENTICATED: (401, "invalid_request_error", "invalid_api_key"),
    _R.MODEL_NOT_FOUND: (404, "invalid_request_error", "model_not_found"),
    _R.ROUTE_NOT_FOUND: (404, "invalid_request_error", "route_not_found"),
    _R.PROMPT_TOO_LONG: (400, "invalid_request_error", "prompt_too_long"),
    _R.COST_EXCEEDS_BURST: (400, "invalid_request_error", "cost_exceeds_burst"),
    _R.TENANT_RATE_LIMITED: (429, "rate_limit_exceeded", "rate_limit_exceeded"),
}
# Every shed, whatever its cause, answers alike: the tier's fallback, or this error.
_OPENAI_SHED = (429, "rate_limit_exceeded", "load_shedding")
# Anthropic's error types; 529 is its "overloaded" (the anthropic client's OverloadedError).
_ANTHROPIC_ERRORS = {
    _R.INVALID_REQUEST: (400, "invalid_request_error"),
    _R.UNAUTHENTICATED: (401, "authentication_error"),
    _R.MODEL_NOT_FOUND: (404, "not_found_error"),
    _R.ROUTE_NOT_FOUND: (404, "not_found_error"),
    _R.PROMPT_TOO_LONG: (400, "invalid_request_error"),
    _R.COST_EXCEEDS_BURST: (400, "invalid_request_error"),
    _R.TENANT_RATE_LIMITED: (429, "rate_limit_error"),
}
_ANTHROPIC_SHED = (529, "overloaded_error")
# TGI's error types (SGLang's and vLLM's generate routes are answered alike).
_TGI_ERRORS = {
    _R.INVALID_REQUEST: (422, "validation"),
    _R.UNAUTHENTICATED: (401, "authentication"),
    _R.MODEL_NOT_FOUND: (404, "not_found"),
    _R.ROUTE_NOT_FOUND: (404, "not_found"),
    _R.PROMPT_TOO_LONG: (422, "validation"),
    _R.COST_EXCEEDS_BURST: (422, "validation"),
    _R.TENANT_RATE_LIMITED: (429, "overloaded"),
}
_TGI_SHED = (429, "overloaded")

# The soonest a shed's client is told to come back: sooner, a retry is noise.
MIN_RETRY_AFTER_SECONDS = 0.05

_FALLBACKS: dict[TextForm, Callable[[ResponseShape, str], tuple[bytes, str]]] = {
    TextForm.CHAT: openai.completion_fallback,
    TextForm.COMPLETION: openai.completion_fallback,
    TextForm.RESPONSE: response_fallback,
    TextForm.MESSAGE: anthropic.message_fallback,
}


@dataclass
class RefusalAnswer:
    """How a refusal is answered: in the shape of the client's API, with its tier's
    fallback where it is shed, as far as each is known when it is refused."""

    tiers: TiersConfig  # the configuration's, until the pool is known
    shape: ResponseShape | None = None
    route: str = ""  # the route's kind
    tier: Tier | None = None
    tenant: str = ""
    pool: Pool | None = None

    def refused(self, refusal: Refusal) -> Respond:
        tier = self.tier
        if tier is None:
            return dataclasses.replace(respond(refusal, self.shape, None), route=self.route)
        tiers = self.pool.tiers if self.pool is not None else self.tiers
        answer = respond(refusal, self.shape, tiers[tier], tier.value)
        pool = self.pool.name if self.pool is not None else ""
        return dataclasses.replace(answer, pool=pool, tenant=self.tenant, route=self.route)


def respond(
    refusal: Refusal,
    shape: ResponseShape | None,
    tier: TierConfig | None,
    tier_name: str = "",
) -> Respond:
    shape = shape or ResponseShape()
    headers = {"x-qos-decision": refusal.reason.value}
    if tier_name:
        headers["x-qos-tier"] = tier_name
    shed = refusal.reason.is_shed
    if shed and tier is not None:
        seconds = shed_retry_after(refusal.retry_after, tier)
        _retry_after(headers, seconds)
        text = tier.message(max(1, math.ceil(seconds)))
        if tier.fallback is FallbackKind.COMPLETION and shape.text is not None:
            body, content_type = _FALLBACKS[shape.text](shape, text)
            headers["content-type"] = content_type
            return Respond(200, body, refusal.reason, headers, tier_name)
        message = text
    else:
        message = refusal.message
        if refusal.retry_after is not None:
            _retry_after(headers, refusal.retry_after)
    if refusal.reason is Reason.UNAUTHENTICATED:
        headers["www-authenticate"] = "Bearer"
    headers["content-type"] = "application/json"
    status, body = _error(shape.api, refusal, message, shed)
    return Respond(status, body, refusal.reason, headers, tier_name)


def shed_retry_after(foreseen: float | None, tier: TierConfig) -> float:
    """When a shed's client is told to come back: when the tier is foreseen admitted
    again, within [MIN_RETRY_AFTER_SECONDS, the tier's retry_after_seconds]; the latter
    when nothing is foreseen."""
    longest = tier.retry_after_seconds
    if foreseen is None:
        return longest
    return min(max(foreseen, MIN_RETRY_AFTER_SECONDS), longest)


def _retry_after(headers: dict[str, str], seconds: float) -> None:
    headers["retry-after"] = str(max(1, math.ceil(seconds)))
    # Retry-After counts whole seconds, too coarse for a bucket that refills in half of
    # one; the official clients wait this one first when it is there.
    headers["retry-after-ms"] = str(max(1, math.ceil(seconds * 1000)))


def _error(api: Api, refusal: Refusal, message: str, shed: bool) -> tuple[int, bytes]:
    reason = refusal.reason
    if api is Api.ANTHROPIC:
        status, kind = _ANTHROPIC_SHED if shed else _ANTHROPIC_ERRORS[reason]
        return status, anthropic.error_body(message, kind)
    if api is Api.TGI:
        status, kind = _TGI_SHED if shed else _TGI_ERRORS[reason]
        return status, dumps({"error": message, "error_type": kind})
    status, error_type, code = _OPENAI_SHED if shed else _OPENAI_ERRORS[reason]
    if api is Api.COHERE:
        return status, dumps({"message": message})
    return status, openai.error_body(message, error_type, code, refusal.param)
