"""The mock's answers on the Responses API and Anthropic Messages routes, shaped as
vLLM's protocol classes serialise them (vllm/entrypoints/openai/responses/protocol.py,
vllm/entrypoints/anthropic/protocol.py), whole or as their event streams."""

from __future__ import annotations

import time
import uuid
from typing import Any

from sidecar.request.answers.sse import event


class ResponsesShaper:
    def __init__(self, model: str) -> None:
        self.model = model
        self.id = f"resp_{uuid.uuid4().hex}"
        self.item_id = f"msg_{uuid.uuid4().hex}"
        self.created = int(time.time())
        self._number = 0
        self._text: list[str] = []

    def _response(self, status: str, output: list, usage: dict | None, finish: str = "") -> dict:
        incomplete = status == "incomplete"
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "model": self.model,
            "status": status,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "error": None,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        }

    def _item(self, text: str | None) -> dict[str, Any]:
        content = [] if text is None else [_output_text(text)]
        return {
            "type": "message",
            "id": self.item_id,
            "status": "completed" if text is not None else "in_progress",
            "role": "assistant",
            "content": content,
        }

    def complete(self, text: str, finish_reason: str, tokens: dict[str, int]) -> dict[str, Any]:
        status = "incomplete" if finish_reason == "length" else "completed"
        return self._response(status, [self._item(text)], _usage(tokens))

    def _event(self, name: str, **fields: Any) -> bytes:
        body = {"type": name, "sequence_number": self._number, **fields}
        self._number += 1
        return event(body, name)

    def first_bytes(self) -> bytes:
        started = self._response("in_progress", [], None)
        at = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        return (
            self._event("response.created", response=started)
            + self._event("response.in_progress", response=started)
            + self._event("response.output_item.added", output_index=0, item=self._item(None))
            + self._event("response.content_part.added", **at, part=_output_text(""))
        )

    def token(self, text: str, finish: str | None) -> bytes:
        self._text.append(text)
        at = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        return self._event("response.output_text.delta", **at, delta=text, logprobs=[])

    def last_bytes(self, tokens: dict[str, int], include_usage: bool, finish: str) -> bytes:
        text = "".join(self._text)
        at = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        done = self.complete(text, finish, tokens)
        terminal = "response.incomplete" if done["status"] == "incomplete" else "response.completed"
        return (
            self._event("response.output_text.done", **at, text=text, logprobs=[])
            + self._event("response.content_part.done", **at, part=_output_text(text))
            + self._event("response.output_item.done", output_index=0, item=self._item(text))
            + self._event(terminal, response=done)
        )


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _usage(tokens: dict[str, int]) -> dict[str, Any]:
    return {
        "input_tokens": tokens["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens["total_tokens"],
    }


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


class MessagesShaper:
    def __init__(self, model: str, prompt_tokens: int = 0) -> None:
        self.model = model
        self.id = f"msg_{uuid.uuid4().hex}"
        self.prompt_tokens = prompt_tokens  # message_start says them

    def complete(self, text: str, finish_reason: str, tokens: dict[str, int]) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": _STOP_REASONS.get(finish_reason, "end_turn"),
            "stop_sequence": None,
            "usage": {
                "input_tokens": tokens["prompt_tokens"],
                "output_tokens": tokens["completion_tokens"],
            },
        }

    def first_bytes(self) -> bytes:
        known = {**_NO_TOKENS, "prompt_tokens": self.prompt_tokens}
        opening = {**self.complete("", "stop", known), "content": [], "stop_reason": None}
        block = {"index": 0, "content_block": {"type": "text", "text": ""}}
        return event({"type": "message_start", "message": opening}, "message_start") + event(
            {"type": "content_block_start", **block}, "content_block_start"
        )

    def token(self, text: str, finish: str | None) -> bytes:
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": text},
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
