"""The mock's answers on the Responses API and Anthropic Messages routes, shaped as
vLLM's protocol classes serialise them (vllm/entrypoints/openai/responses/protocol.py,
vllm/entrypoints/anthropic/protocol.py), whole or as their event streams."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sidecar.request.answers.sse import event


def _vllm_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:16]}"  # vLLM's: a prefix and 16 hex digits


class ResponsesShaper:
    def __init__(self, model: str, max_output_tokens: int | None = None) -> None:
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.id = _vllm_id("resp_")
        self.item_id = _vllm_id("msg_")
        self.created = int(time.time())
        self._number = 0
        self._text: list[str] = []

    def _response(self, status: str, output: list, usage: dict | None) -> dict:
        """The response object, every field vLLM 0.32 serialises, in its order."""
        incomplete = status == "incomplete"
        return {
            "id": self.id,
            "created_at": self.created,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": None,
            "metadata": None,
            "model": self.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "tool_choice": "none",
            "tools": [],
            "top_p": 1.0,
            "background": False,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": None,
            "previous_response_id": None,
            "prompt": None,
            "reasoning": None,
            "service_tier": "auto",
            "status": status,
            "text": None,
            "top_logprobs": None,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "input_messages": None,
            "output_messages": None,
        }

    def _item(self, text: str | None) -> dict[str, Any]:
        content = [] if text is None else [_output_text(text, None)]
        return {
            "id": self.item_id,
            "content": content,
            "role": "assistant",
            "status": "completed" if text is not None else "in_progress",
            "type": "message",
            "phase": None,
        }

    def complete(self, text: str, finish_reason: str, tokens: dict[str, int]) -> dict[str, Any]:
        status = "incomplete" if finish_reason == "length" else "completed"
        return self._response(status, [self._item(text)], _usage(tokens))

    def _event(self, name: str, **fields: Any) -> bytes:
        body = {**fields, "sequence_number": self._number, "type": name}
        self._number += 1
        return event(body, name)

    def _at(self) -> dict[str, Any]:
        return {"content_index": 0, "item_id": self.item_id, "output_index": 0}

    def first_bytes(self) -> bytes:
        started = self._response("in_progress", [], None)
        return (
            self._event("response.created", response=started)
            + self._event("response.in_progress", response=started)
            + self._event("response.output_item.added", item=self._item(None), output_index=0)
            + self._event("response.content_part.added", **self._at(), part=_output_text("", []))
        )

    def token(self, text: str, finish: str | None, generated: int = 0) -> bytes:
        self._text.append(text)
        at = self._at()
        return self._event("response.output_text.delta", **at, delta=text, logprobs=[])

    def last_bytes(self, tokens: dict[str, int], include_usage: bool, finish: str) -> bytes:
        text = "".join(self._text)
        at = self._at()
        # vLLM ends with response.completed whatever the status, `incomplete` included.
        return (
            self._event("response.output_text.done", **at, logprobs=[], text=text)
            + self._event("response.content_part.done", **at, part=_output_text(text, None))
            + self._event("response.output_item.done", item=self._item(text), output_index=0)
            + self._event("response.completed", response=self.complete(text, finish, tokens))
        )


def _output_text(text: str, logprobs: list | None) -> dict[str, Any]:
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}


def _usage(tokens: dict[str, int]) -> dict[str, Any]:
    return {
        "input_tokens": tokens["prompt_tokens"],
        "input_tokens_details": {
            "cached_tokens": 0,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": tokens["completion_tokens"],
        "output_tokens_details": {
            "reasoning_tokens": 0,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": tokens["total_tokens"],
    }


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


class MessagesShaper:
    def __init__(self, model: str, prompt_tokens: int = 0) -> None:
        self.model = model
        self.id = _vllm_id("chatcmpl-")  # vLLM's Messages answers keep its chat ids
        self.prompt_tokens = prompt_tokens  # message_start says them

    def _message(self, content: list, stop_reason: str | None, tokens: dict[str, int]) -> dict:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": self.model,
            "stop_reason": stop_reason,
        }
        # The whole answer leaves out what is null (its stop_sequence); the stream does not.
        if stop_reason is None:
            message["stop_sequence"] = None
        message["usage"] = {
            "input_tokens": tokens["prompt_tokens"],
            "output_tokens": tokens["completion_tokens"],
        }
        return message

    def complete(self, text: str, finish_reason: str, tokens: dict[str, int]) -> dict[str, Any]:
        content = [{"type": "text", "text": text}]
        return self._message(content, _STOP_REASONS.get(finish_reason, "end_turn"), tokens)

    def first_bytes(self) -> bytes:
        known = {**_NO_TOKENS, "prompt_tokens": self.prompt_tokens}
        opening = self._message([], None, known)
        block = {"content_block": {"type": "text", "text": ""}, "index": 0}
        return event({"type": "message_start", "message": opening}, "message_start") + event(
            {"type": "content_block_start", **block}, "content_block_start"
        )

    def token(self, text: str, finish: str | None, generated: int = 0) -> bytes:
        delta = {
            "type": "content_block_delta",
            "delta": {"type": "text_delta", "text": text},
            "index": 0,
        }
        return event(delta, "content_block_delta")

    def last_bytes(self, tokens: dict[str, int], include_usage: bool, finish: str) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": _STOP_REASONS.get(finish, "end_turn"), "stop_sequence": None},
            "usage": {
                "input_tokens": tokens["prompt_tokens"],
                "output_tokens": tokens["completion_tokens"],
            },
        }
        return (
            event({"type": "content_block_stop", "index": 0}, "content_block_stop")
            + event(delta, "message_delta")
            + event({"type": "message_stop"}, "message_stop")
        )


_NO_TOKENS = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
