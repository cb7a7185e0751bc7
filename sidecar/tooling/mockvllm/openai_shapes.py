"""The JSON the mock answers with, shaped as vLLM's OpenAI-compatible server does."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from sidecar.request.openai_api.request import Endpoint


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


class ResponseShaper:
    """Builds one request's response objects: whole, or as SSE chunks."""

    def __init__(self, endpoint: Endpoint, model: str) -> None:
        self.endpoint = endpoint
        self.model = model
        prefix = "chatcmpl" if endpoint is Endpoint.CHAT else "cmpl"
        # vLLM's ids: the prefix and 32 hex digits (a random UUID's).
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def complete(self, text: str, finish_reason: str, tokens: dict[str, int]) -> dict[str, Any]:
        if self.endpoint is Endpoint.CHAT:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
            body = self._envelope("chat.completion", [choice])
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
            body = self._envelope("text_completion", [choice])
        body["usage"] = tokens
        return body

    def chunk(
        self,
        text: str | None,
        finish_reason: str | None = None,
        *,
        first: bool = False,
    ) -> bytes:
        """One SSE chunk; like vLLM 0.33 it has no usage field (that comes last, alone)."""
        if self.endpoint is Endpoint.CHAT:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if text is not None:
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            body = self._envelope("chat.completion.chunk", [choice])
        else:
            choice = {
                "index": 0,
                "text": text or "",
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
            body = self._envelope("text_completion", [choice])
        return sse(body)

    # The stream, as the server writes it: the opening before the first token, a chunk a
    # token, and the close (usage when asked for, then [DONE]).
    def first_bytes(self) -> bytes:
        return self.chunk(None, first=True) if self.endpoint is Endpoint.CHAT else b""

    def token(self, text: str, finish: str | None) -> bytes:
        return self.chunk(text, finish)

    def last_bytes(self, tokens: dict[str, int], include_usage: bool, finish: str) -> bytes:
        return (self.usage_chunk(tokens) if include_usage else b"") + SSE_DONE

    def usage_chunk(self, tokens: dict[str, int]) -> bytes:
        obj = "chat.completion.chunk" if self.endpoint is Endpoint.CHAT else "text_completion"
        body = self._envelope(obj, [])
        body["usage"] = tokens
        return sse(body)


def sse(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def error_body(
    message: str, status: int, err_type: str = "BadRequestError", param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}
