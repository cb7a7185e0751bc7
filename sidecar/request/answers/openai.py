"""OpenAI chat completions and completions: the fallback as a `chat.completion` or a
`text_completion` whose finish_reason is "load_shedding_fallback" (one SSE chunk and
`data: [DONE]` when the request streamed), and the OpenAI error object."""

from __future__ import annotations

import secrets
import time
from typing import Any

from sidecar.request.answers.sse import dumps, event
from sidecar.request.bodies.parsed import ResponseShape, TextForm

FINISH_REASON = "load_shedding_fallback"
_ZERO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def completion_fallback(shape: ResponseShape, message: str) -> tuple[bytes, str]:
    """The body and its content type."""
    chat = shape.text is TextForm.CHAT
    choices: list[dict[str, Any]] = []
    for index in range(shape.choices):
        if chat:
            said = {"role": "assistant", "content": message}
            choice = {"index": index, ("delta" if shape.stream else "message"): said}
        else:
            choice = {"index": index, "text": message}
        choices.append(choice | {"logprobs": None, "finish_reason": FINISH_REASON})
    if chat:
        obj = "chat.completion.chunk" if shape.stream else "chat.completion"
    else:
        obj = "text_completion"
    body = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-qos-{secrets.token_hex(8)}",
        "object": obj,
        "created": int(time.time()),
        "model": shape.model or "qos-fallback",
        "choices": choices,
    }
    if not shape.stream:
        body["usage"] = _ZERO_USAGE
        return dumps(body), "application/json"
    if shape.include_usage:
        body["usage"] = _ZERO_USAGE
    return event(body) + b"data: [DONE]\n\n", "text/event-stream"


def error_body(message: str, error_type: str, code: str | None, param: str | None = None) -> bytes:
    return dumps({"error": {"message": message, "type": error_type, "param": param, "code": code}})
