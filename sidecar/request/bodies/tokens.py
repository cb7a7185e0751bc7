"""The text a request puts into the model's context, and what it costs in tokens.

The default count is an estimate that needs no tokenizer: about four ASCII characters a
token, 0.8 tokens a non-ASCII character (CJK text runs near one token a character, not a
quarter), plus a few tokens of chat template per message. bench/token_estimate.py
measures its error against real tokenizers. `TokenizerCounter` counts exactly with the
model's own tokenizer file (Hugging Face `tokenizers`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# English text and code average about four characters a token in BPE vocabularies...
ASCII_CHARS_PER_TOKEN = 4
# ...while Chinese, Japanese and Korean run near a token a character.
NON_ASCII_TOKENS_PER_CHAR = 0.8
# Chat templates wrap each message in role markers.
TOKENS_PER_MESSAGE = 4


# Tokens of one piece of prompt text.
TextCounter = Callable[[str], int]


def estimate_prompt_tokens(body: dict[str, Any]) -> int:
    """Estimated input tokens of a chat or completions body, 1 at least: what the
    benchmarks' clients and the lower bound of a policy count by."""
    tokens = sum(estimate_text_tokens(text) for text in prompt_texts(body))
    messages = body.get("messages")
    if isinstance(messages, list):
        tokens += TOKENS_PER_MESSAGE * len(messages)
    tokens += token_id_prompts(body.get("prompt"))
    return max(tokens, 1)


def estimate_text_tokens(text: str) -> int:
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    ascii_chars = len(text) - non_ascii
    return math.ceil(ascii_chars / ASCII_CHARS_PER_TOKEN + non_ascii * NON_ASCII_TOKENS_PER_CHAR)


class TokenizerCounter:
    """Exact counts with a tokenizer.json (the model's own tokenizer)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer  # only needed when a tokenizer file is configured

        self._tokenizer = Tokenizer.from_file(str(path))

    def count_text(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def prompt_texts(body: dict[str, Any]) -> Iterator[str]:
    """Every piece of text the prompt holds: messages, completion prompts, tool schemas."""
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
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        # Tool schemas are rendered into the prompt by the chat template.
        yield json.dumps(tools, separators=(",", ":"))


def _content_texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                yield part["text"]


def token_id_prompts(prompt: Any) -> int:
    """Completions accept prompts as token ids: a list of ints or a list of such lists."""
    if not isinstance(prompt, list) or not prompt:
        return 0
    if all(isinstance(t, int) for t in prompt):
        return len(prompt)
    return sum(len(p) for p in prompt if isinstance(p, list))
