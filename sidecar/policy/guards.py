"""Tier guards from the brief: cap P0's output, refuse prompts too long for a tier."""

from __future__ import annotations

from typing import Any

from sidecar.config.schema import TierConfig
from sidecar.openai_api.request import CompletionRequest
from sidecar.policy.refusals import Reason, Refusal

_OUTPUT_LIMIT_KEYS = ("max_tokens", "max_completion_tokens")


def apply_guards(
    request: CompletionRequest, tier: TierConfig, tier_name: str, prompt_tokens: int
) -> dict[str, Any] | None:
    """The body to forward instead, when a guard changes it; None to forward it as is."""
    if tier.max_prompt_tokens is not None and prompt_tokens > tier.max_prompt_tokens:
        raise Refusal(
            Reason.PROMPT_TOO_LONG,
            f"This prompt has about {prompt_tokens} tokens; the {tier_name.upper()} tier "
            f"accepts at most {tier.max_prompt_tokens}. Shorten the prompt.",
            param="messages" if "messages" in request.body else "prompt",
        )
    cap = tier.max_tokens_cap
    if cap is None:
        return None
    body = request.body
    present = [key for key in _OUTPUT_LIMIT_KEYS if body.get(key) is not None]
    if not present:
        return {**body, "max_tokens": cap}
    over = {key: cap for key in present if body[key] > cap}
    return {**body, **over} if over else None
