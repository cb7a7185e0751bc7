"""How many tokens an answer had, when its usage was not seen: estimated from its size.

A whole (JSON) answer's usage reaches the sidecar exactly, through Envoy's access log.
A streamed answer's does not (Envoy does not read an SSE stream for it), but the access
log says how many bytes went to the client. vLLM sends one SSE chunk per token, each of
the same shape but for its text, so the count is the bytes less the stream's fixed parts,
over one chunk's size: its envelope (id, model, the choice's fields) and the average
token's text. `tests/unit/test_usage_estimate.py` measures the error.
"""

from __future__ import annotations

import json

# vLLM's ids: chatcmpl-/cmpl- and 32 hex digits; `created` has ten digits until 2286.
_ID, _CREATED = "0" * 32, 1_700_000_000
# Bytes of a token's text in a chunk, on average (BPE tokens of English run near four
# characters; JSON escaping adds a little).
TOKEN_TEXT_BYTES = 4.2


def _chunk(chat: bool, model: str, text: str, finish: str | None = None) -> int:
    """The bytes of one SSE chunk of this shape."""
    # As vLLM serialises them (unset fields left out): chat chunks carry no stop_reason.
    if chat:
        choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
        envelope = {"id": f"chatcmpl-{_ID}", "object": "chat.completion.chunk"}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        choice["stop_reason"] = None
        envelope = {"id": f"cmpl-{_ID}", "object": "text_completion"}
    body = {**envelope, "created": _CREATED, "model": model, "choices": [choice]}
    return len(b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n")


def streamed_output_tokens(body_bytes: int, chat: bool, model: str) -> int:
    """Tokens of a streamed answer of `body_bytes` bytes (0 for an empty one)."""
    per_token = _chunk(chat, model, "") + TOKEN_TEXT_BYTES
    # The stream's own parts: the role chunk (chat) and the closing `data: [DONE]`.
    fixed = (_chunk(chat, model, "") if chat else 0) + len(b"data: [DONE]\n\n")
    return max(0, round((body_bytes - fixed) / per_token))
