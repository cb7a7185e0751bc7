"""The JSON the mock answers with, shaped as vLLM's OpenAI-compatible server does."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from sidecar.request.bodies.parsed import StreamUsage
from sidecar.routes.kinds import RouteKind

# vLLM names its build here; the version the mock's shapes are checked against
# (tests/engine/test_mock_matches_vllm.py).
SYSTEM_FINGERPRINT = "vllm-0.32.0-6e8481f5"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


NO_STREAM_USAGE = StreamUsage()


class ResponseShaper:
    """Builds one request's response objects: whole, or as SSE chunks, field for field
    as vLLM 0.32 writes them (every field it sends, null ones included, in its order:
    a stream's size is how its tokens are estimated when it carries no usage)."""

    def __init__(
        self,
        kind: RouteKind,
        model: str,
        stream_usage: StreamUsage = NO_STREAM_USAGE,
        prompt_tokens: int = 0,
    ) -> None:
        self.kind = kind
        self.model = model
        # A stream's usage, as its stream_options asked: a running count in every chunk
        # (continuous), the closing chunk (final).
        self.stream_usage = stream_usage
        self.prompt_tokens = prompt_tokens
        prefix = "chatcmpl" if kind is RouteKind.CHAT else "cmpl"
        # vLLM's ids: the prefix and 16 hex digits.
        self.id = f"{prefix}-{uuid.uuid4().hex[:16]}"
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
        whole_usage = {**tokens, "prompt_tokens_details": None, "completion_tokens_details": None}
        if self.kind is RouteKind.CHAT:
            message = {"role": "assistant", "content": text, **dict.fromkeys(_MESSAGE_NULLS)}
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
            body = self._envelope("chat.completion", [choice])
            tail: tuple[str, ...] = _CHAT_NULLS
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                **dict.fromkeys(_COMPLETION_CHOICE_NULLS),
            }
            body = self._envelope("text_completion", [choice])
            tail = _TRANSFER_NULLS
        body.update(service_tier=None, system_fingerprint=SYSTEM_FINGERPRINT, usage=whole_usage)
        body.update(dict.fromkeys(tail))
        return body

    def complete_many(
        self, answers: list[tuple[str, str]], tokens: dict[str, int]
    ) -> dict[str, Any]:
        """A whole answer of several choices (`n`): each (text, finish reason) its own,
        indexed in order; the usage counts them all."""
        body = self.complete(answers[0][0], answers[0][1], tokens)
        (template,) = body["choices"]
        choices = []
        for index, (text, finish_reason) in enumerate(answers):
            choice = {**template, "index": index, "finish_reason": finish_reason}
            if "message" in choice:
                choice["message"] = {**choice["message"], "content": text}
            else:
                choice["text"] = text
            choices.append(choice)
        body["choices"] = choices
        return body

    def chunk(
        self,
        text: str | None,
        finish_reason: str | None = None,
        *,
        first: bool = False,
        index: int = 0,
        generated: int = 0,
    ) -> bytes:
        """One SSE chunk: with the running usage (`generated` tokens of this choice so
        far) when the stream asked for it; a choice's last names vLLM's build (its
        fingerprint) unless the closing usage chunk comes to do it."""
        if self.kind is RouteKind.CHAT:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else {}
            if text is not None:
                delta["content"] = text
            choice = {
                "index": index,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            if finish_reason is not None:
                choice["stop_reason"] = None
            if not first:
                choice["token_ids"] = None
            body = self._envelope("chat.completion.chunk", [choice])
            self._running(body, finish_reason, 0 if first else generated)
            if first:
                body.update(prompt_token_ids=None, prompt_text=None)
        else:
            choice = {
                "index": index,
                "text": text or "",
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }
            body = self._envelope("text_completion", [choice])
            self._running(body, finish_reason, generated)
        return sse(body)

    def _running(self, body: dict[str, Any], finish_reason: str | None, generated: int) -> None:
        if self.stream_usage.continuous:  # vLLM's chat chunks name the details, as null
            running: dict[str, Any] = usage(self.prompt_tokens, generated)
            if self.kind is RouteKind.CHAT:
                running["completion_tokens_details"] = None
            body["usage"] = running
        if finish_reason is not None and not self.stream_usage.final:
            body["system_fingerprint"] = SYSTEM_FINGERPRINT

    # The stream, as the server writes it: the opening before the first token, a chunk a
    # token (or `stream_interval` of them), and the close (usage when asked for, then
    # [DONE]).
    def first_bytes(self) -> bytes:
        return self.chunk(None, first=True) if self.kind is RouteKind.CHAT else b""

    def token(self, text: str, finish: str | None, generated: int = 0) -> bytes:
        return self.chunk(text, finish, generated=generated)

    def last_bytes(self, tokens: dict[str, int], include_usage: bool, finish: str) -> bytes:
        return (self.usage_chunk(tokens) if include_usage else b"") + SSE_DONE

    def usage_chunk(self, tokens: dict[str, int]) -> bytes:
        obj = "chat.completion.chunk" if self.kind is RouteKind.CHAT else "text_completion"
        body = self._envelope(obj, [])
        body.update(usage=tokens, system_fingerprint=SYSTEM_FINGERPRINT)
        return sse(body)


# The fields vLLM 0.32 sends as null when it has nothing for them.
_MESSAGE_NULLS = ("refusal", "annotations", "audio", "function_call", "reasoning")
_COMPLETION_CHOICE_NULLS = ("token_ids", "prompt_logprobs", "prompt_token_ids", "routed_experts")
_TRANSFER_NULLS = ("kv_transfer_params", "ec_transfer_params", "metrics")
_CHAT_NULLS = ("prompt_logprobs", "prompt_token_ids", "prompt_text", *_TRANSFER_NULLS)


def sse(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def error_body(
    message: str, status: int, err_type: str = "BadRequestError", param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}
