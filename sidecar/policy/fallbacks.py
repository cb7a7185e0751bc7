"""OpenAI-shaped answers the sidecar gives itself: one builder per shape.

A shed request gets an answer its client already knows how to read: a `chat.completion`
or a `text_completion` whose finish_reason is "load_shedding_fallback", as one SSE chunk
and `data: [DONE]` when the request streamed, or an OpenAI error object.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sidecar.openai_api.request import Endpoint

FINISH_REASON = "load_shedding_fallback"
_ZERO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


@dataclass(frozen=True)
class ResponseShape:
    """What the client asked for, so the fallback matches what it will parse."""

    endpoint: Endpoint
    stream: bool = False
    include_usage: bool = False
    model: str | None = None


def _dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _envelope(shape: ResponseShape, obj: str, choice: dict[str, Any]) -> dict[str, Any]:
    prefix = "chatcmpl" if shape.endpoint is Endpoint.CHAT else "cmpl"
    return {
        "id": f"{prefix}-qos-{secrets.token_hex(8)}",
        "object": obj,
        "created": int(time.time()),
        "model": shape.model or "qos-fallback",
        "choices": [choice],
    }


def completion_fallback(shape: ResponseShape, message: str) -> tuple[bytes, str]:
    """The body and its content type."""
    chat = shape.endpoint is Endpoint.CHAT
    if chat:
        said = {"role": "assistant", "content": message}
        choice = {"index": 0, ("delta" if shape.stream else "message"): said}
        obj = "chat.completion.chunk" if shape.stream else "chat.completion"
    else:
        choice = {"index": 0, "text": message}
        obj = "text_completion"
    choice |= {"logprobs": None, "finish_reason": FINISH_REASON}
    body = _envelope(shape, obj, choice)
    if not shape.stream:
        body["usage"] = _ZERO_USAGE
        return _dumps(body), "application/json"
    if shape.include_usage:
        body["usage"] = _ZERO_USAGE
    return b"data: " + _dumps(body) + b"\n\ndata: [DONE]\n\n", "text/event-stream"


def error_body(message: str, error_type: str, code: str | None, param: str | None = None) -> bytes:
    return _dumps({"error": {"message": message, "type": error_type, "param": param, "code": code}})
