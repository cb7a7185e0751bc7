"""The default count: estimated from the prompt's text, with no tokenizer (the text's
length, bodies/tokens.py, and a few tokens of chat template per message)."""

from __future__ import annotations

from typing import Any

from sidecar.config.template import TemplateField
from sidecar.request.bodies import openai
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.request.bodies.tokens import estimate_text_tokens


def estimate(parsed: ParsedRequest, unrendered: frozenset[TemplateField] = frozenset()) -> int:
    """The prompt's tokens but media's: the texts of fields the pool's chat template
    does not render are left out."""
    prompt = parsed.prompt
    texts = prompt.rendered_texts(unrendered)
    return (
        prompt.fixed_tokens
        + prompt.template_overhead
        + sum(estimate_text_tokens(text) for text in texts)
    )


def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """Estimated input tokens of a chat body (with `messages`) or a completions body, 1
    at least: what the benchmarks' clients and the lower bound of a policy count by."""
    read = openai.read_chat if "messages" in body else openai.read_completions
    return max(estimate(read(body)), 1)
