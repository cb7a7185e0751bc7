"""Anthropic Messages: the fallback as a `message` with the text (streamed, the event
sequence message_start ... content_block_delta ... message_stop), and Anthropic's
error object `{"type": "error", "error": {"type": ..., "message": ...}}`."""

from __future__ import annotations

import secrets
from typing import Any

from sidecar.request.answers.sse import dumps, event
from sidecar.request.bodies.parsed import ResponseShape

_USAGE = {"input_tokens": 0, "output_tokens": 0}


def message_fallback(shape: ResponseShape, text: str) -> tuple[bytes, str]:
    message = {
        "id": f"msg_qos{secrets.token_hex(12)}",
        "type": "message",
        "role": "assistant",
        "model": shape.model or "qos-fallback",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": _USAGE,
    }
    if not shape.stream:
        return dumps(message), "application/json"
    opening = {**message, "content": [], "stop_reason": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": opening}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"index": 0}),
        (
            "message_delta",
            {"delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": _USAGE},
        ),
        ("message_stop", {}),
    ]
    body = b"".join(event({"type": name, **fields}, name) for name, fields in events)
    return body, "text/event-stream"


def error_body(message: str, error_type: str) -> bytes:
    return dumps({"type": "error", "error": {"type": error_type, "message": message}})
