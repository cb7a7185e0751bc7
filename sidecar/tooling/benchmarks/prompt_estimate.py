"""What the benchmarks' clients and the lower bound of a policy count a body's prompt by:
the sidecar's own estimate, as it reads the body."""

from __future__ import annotations

from typing import Any

from sidecar.request.bodies import openai
from sidecar.request.bodies.tokens import estimate


def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """Estimated input tokens of a chat body (with `messages`) or a completions body, 1
    at least."""
    read = openai.read_chat if "messages" in body else openai.read_completions
    return max(estimate(read(body)), 1)
