"""Tier guards from the brief: cap P0's output, refuse prompts too long for a tier. Each
API names its output limit its own way (sidecar/request/bodies/parsed.py OutputLimit)."""

from __future__ import annotations

from typing import Any

from sidecar.config.schema import TierConfig
from sidecar.refusals import Reason, Refusal
from sidecar.request.bodies.parsed import FieldPath, ParsedRequest


def apply_guards(
    request: ParsedRequest, tier: TierConfig, tier_name: str, prompt_tokens: int
) -> dict[str, Any] | None:
    """The body to forward instead, when a guard changes it; None to forward it as is."""
    if tier.max_prompt_tokens is not None and prompt_tokens > tier.max_prompt_tokens:
        raise Refusal(
            Reason.PROMPT_TOO_LONG,
            f"This prompt has about {prompt_tokens} tokens; the {tier_name.upper()} tier "
            f"accepts at most {tier.max_prompt_tokens}. Shorten the prompt.",
            param=request.prompt_param,
        )
    total, output = tier.max_tokens_cap, request.output
    if total is None or output is None or not request.json_body:
        return None
    # The cap is the request's, whatever number of answers it asks for: each gets its
    # share of it (`n` answers of at most cap/n tokens), none gets nothing.
    cap = output.each_within(total)
    if cap < 1:
        raise Refusal(
            Reason.INVALID_REQUEST,
            f"This request asks for {output.per_request} answers; the {tier_name.upper()} "
            f"tier allows at most {total} tokens of output in all, so at most {total} "
            "answers. Ask for fewer.",
            param="n",
        )
    body = request.body
    present = [path for path in output.fields if _get(body, path) is not None]
    if not present:
        return _set(body, output.default_field, cap)
    for path in present:
        if _get(body, path) > cap:
            body = _set(body, path, cap)
    return body if body is not request.body else None


def _get(body: dict[str, Any], path: FieldPath) -> Any:
    value: Any = body
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _set(body: dict[str, Any], path: FieldPath, value: int) -> dict[str, Any]:
    """A copy of `body` with `path` set, its parents copied (the original is untouched)."""
    head, *rest = path
    if not rest:
        return {**body, head: value}
    inner = body.get(head)
    return {**body, head: _set(inner if isinstance(inner, dict) else {}, tuple(rest), value)}
