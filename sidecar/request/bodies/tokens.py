"""What a prompt's text costs in tokens, estimated with no tokenizer: the default count
(`estimate`) when the sidecar has not the model's own files.

About four ASCII characters a token, 0.8 tokens a non-ASCII character (CJK text runs
near one token a character, not a quarter), plus a few tokens of chat template per
message. bench/token_estimate.py measures its error against real tokenizers, by kind
of field; request/counting/exact.py counts exactly with the model's own files.
"""

from __future__ import annotations

import math
from typing import Any

from sidecar.config.template import TemplateField
from sidecar.request.bodies.parsed import ParsedRequest

# English text and code average about four characters a token in BPE vocabularies...
ASCII_CHARS_PER_TOKEN = 4
# ...while Chinese, Japanese and Korean run near a token a character.
NON_ASCII_TOKENS_PER_CHAR = 0.8
# Chat templates wrap each message in role markers.
TOKENS_PER_MESSAGE = 4


def estimate_text_tokens(text: str) -> int:
    if text.isascii():  # known without a look at the text: CPython marks ASCII strings
        return math.ceil(len(text) / ASCII_CHARS_PER_TOKEN)
    non_ascii = len(text) - len(text.encode("ascii", "ignore"))
    ascii_chars = len(text) - non_ascii
    return math.ceil(ascii_chars / ASCII_CHARS_PER_TOKEN + non_ascii * NON_ASCII_TOKENS_PER_CHAR)


def token_id_prompts(prompt: Any) -> int:
    """Completions accept prompts as token ids: a list of ints or a list of such lists."""
    if not isinstance(prompt, list) or not prompt:
        return 0
    if all(isinstance(t, int) for t in prompt):
        return len(prompt)
    return sum(len(p) for p in prompt if isinstance(p, list))


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
