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

# vLLM's ids: chatcmpl-/cmpl- and 16 hex digits; `created` has ten digits until 2286.
_ID, _CREATED = "0" * 16, 1_700_000_000
# Bytes of a token's text in a chunk, on average (BPE tokens of English run near four
# characters; JSON escaping adds a little).
TOKEN_TEXT_BYTES = 4.2


def _chunk(chat: bool, model: str, text: str, first: bool = False) -> int:
    """The bytes of one SSE chunk of this shape, as vLLM 0.32 serialises them (its null
    fields included; tests/engine/test_mock_matches_vllm.py holds the mock to them)."""
    if chat:
        delta = {"role": "assistant", "content": text} if first else {"content": text}
        choice: dict[str, object] = {
            "index": 0,
            "delta": delta,
            "logprobs": None,
            "finish_reason": None,
        }
        if not first:
            choice["token_ids"] = None
        envelope = {"id": f"chatcmpl-{_ID}", "object": "chat.completion.chunk"}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
        choice.update(stop_reason=None, prompt_token_ids=None, token_ids=None)
        envelope = {"id": f"cmpl-{_ID}", "object": "text_completion"}
    body = {**envelope, "created": _CREATED, "model": model, "choices": [choice]}
    if first:
        body.update(prompt_token_ids=None, prompt_text=None)
    return len(b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n")


def streamed_output_tokens(body_bytes: int, chat: bool, model: str) -> int:
    """Tokens of a streamed answer of `body_bytes` bytes (0 for an empty one)."""
    per_token = _chunk(chat, model, "") + TOKEN_TEXT_BYTES
    # The stream's own parts: the role chunk (chat) and the closing `data: [DONE]`.
    fixed = (_chunk(chat, model, "", first=True) if chat else 0) + len(b"data: [DONE]\n\n")
    return max(0, round((body_bytes - fixed) / per_token))
