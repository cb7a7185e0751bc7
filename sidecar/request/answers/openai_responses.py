"""The OpenAI Responses API's fallback: a `response` whose status is `incomplete` (the
reason in incomplete_details), the fallback text as its output message; streamed, the
events the SDK reads: response.created ... response.output_text.delta ... and the
terminal response.incomplete."""

from __future__ import annotations

import secrets
import time
from typing import Any

from sidecar.request.answers.sse import dumps, event
from sidecar.request.bodies.parsed import ResponseShape

INCOMPLETE_REASON = "load_shedding"


def response_fallback(shape: ResponseShape, message: str) -> tuple[bytes, str]:
    item_id = f"msg_qos{secrets.token_hex(12)}"
    text = {"type": "output_text", "text": message, "annotations": [], "logprobs": []}
    item = {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [text],
    }
    done = _response(shape, "incomplete", [item])
    if not shape.stream:
        return dumps(done), "application/json"
    started = _response(shape, "in_progress", [], done["id"], done["created_at"])
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        ("response.output_item.added", {"output_index": 0, "item": {**item, "content": []}}),
        ("response.content_part.added", {**at, "part": {**text, "text": ""}}),
        ("response.output_text.delta", {**at, "delta": message, "logprobs": []}),
        ("response.output_text.done", {**at, "text": message, "logprobs": []}),
        ("response.content_part.done", {**at, "part": text}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.incomplete", {"response": done}),
    ]
    body = b"".join(
        event({"type": name, "sequence_number": number, **fields}, name)
        for number, (name, fields) in enumerate(events)
    )
    return body, "text/event-stream"


def _response(
    shape: ResponseShape,
    status: str,
    output: list[dict[str, Any]],
    response_id: str | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    return {
        "id": response_id or f"resp_qos{secrets.token_hex(12)}",
        "object": "response",
        "created_at": created or int(time.time()),
        "status": status,
        "incomplete_details": {"reason": INCOMPLETE_REASON} if status == "incomplete" else None,
        "error": None,
        "model": shape.model or "qos-fallback",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 0,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 0,
        },
    }
