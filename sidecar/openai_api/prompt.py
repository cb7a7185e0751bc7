"""The text a request puts into the model's context, and a cheap estimate of its tokens."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

# English text averages about four characters a token in BPE vocabularies.
CHARS_PER_TOKEN = 4
# Chat templates wrap each message in role markers.
TOKENS_PER_MESSAGE = 4


def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """Estimated input tokens of a chat or completions body; 1 at least."""
    tokens = sum(_text_tokens(text) for text in _texts(body))
    messages = body.get("messages")
    if isinstance(messages, list):
        tokens += TOKENS_PER_MESSAGE * len(messages)
    tokens += _token_id_prompts(body.get("prompt"))
    return max(tokens, 1)


def _text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _texts(body: dict[str, Any]) -> Iterator[str]:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                yield from _content_texts(message.get("content"))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        yield prompt
    elif isinstance(prompt, list):
        yield from (p for p in prompt if isinstance(p, str))


def _content_texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]


def _token_id_prompts(prompt: Any) -> int:
    """Completions accept prompts as token ids: a list of ints or a list of such lists."""
    if not isinstance(prompt, list) or not prompt:
        return 0
    if all(isinstance(t, int) for t in prompt):
        return len(prompt)
    return sum(len(p) for p in prompt if isinstance(p, list))
