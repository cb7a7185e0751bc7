"""Ending an answer's stream early, well-formed, in its API's shape.

`StreamTail` follows a stream as it passes: it hands on whole events only (the part of an
event a chunk ends in is held back until the rest comes), so the stream can be closed
after any of them; and keeps what a closing needs: the first event (the answer's id,
model, creation time), the latest usage the engine sent (a running count in every chunk
when asked for: continuous usage), and, for the APIs that name their events, what is
still open (Anthropic's content blocks) and how many deltas went out.

`end()` gives the closing events:
- chat completions and completions: a chunk whose every choice has finish_reason
  `EVICTED`, the closing usage chunk with the usage so far (where the engine sent one),
  then `data: [DONE]`;
- Anthropic Messages: `content_block_stop` for each open block, `message_delta` with
  stop_reason `pause_turn` (the turn paused; the conversation may go on from it) and the
  output tokens so far, `message_stop`;
- the Responses API: `response.incomplete`, its reason `EVICTED`, with the usage so far.
The events are SSE as the engines write them: `data: ...` lines ended by a blank line,
named (`event: ...`) where the API names them.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sidecar.request.answers.sse import event
from sidecar.request.bodies.parsed import TextForm

EVICTED = "load_shedding_evicted"
MESSAGE_STOP_REASON = "pause_turn"
_END = b"\n\n"
_DATA = b"data: "


class StreamTail:
    def __init__(self, form: TextForm) -> None:
        self._form = form
        self._held = b""
        self._first: dict[str, Any] | None = None
        self._usage: dict[str, Any] | None = None
        self._choices: set[int] = set()
        self._open_blocks: list[int] = []
        self._deltas = 0
        self._sequence = 0

    def feed(self, data: bytes) -> bytes:
        """What of `data` (after what was held back) to pass on now: its whole events."""
        data = self._held + data if self._held else data
        cut = data.rfind(_END)
        if cut < 0:
            self._held = data
            return b""
        whole, self._held = data[: cut + 2], data[cut + 2 :]
        for block in whole.split(_END)[:-1]:
            self._note(block)
        return whole

    def flush(self) -> bytes:
        """What was held back, as the stream ends of itself."""
        held, self._held = self._held, b""
        return held

    @property
    def tokens(self) -> int:
        """Output tokens so far: the engine's running count where it sends one, else the
        deltas passed."""
        counted = (self._usage or {}).get("completion_tokens")
        return counted if isinstance(counted, int) else self._deltas

    def end(self) -> bytes:
        """The closing events (a part-event held back is dropped)."""
        self._held = b""
        if self._form is TextForm.MESSAGE:
            return self._end_message()
        if self._form is TextForm.RESPONSE:
            return self._end_response()
        return self._end_completion()

    # -- following --------------------------------------------------------------------

    def _note(self, block: bytes) -> None:
        name, data = _parts(block)
        if data is None or data == b"[DONE]":
            return
        if self._form is TextForm.MESSAGE:
            self._note_message(name, data)
        elif self._form is TextForm.RESPONSE:
            self._note_response(name, data)
        else:
            self._note_completion(data)

    def _note_completion(self, data: bytes) -> None:
        self._deltas += 1
        if self._first is None or b'"usage":{' in data:
            body = json.loads(data)
            self._first = self._first or body
            self._usage = body.get("usage") or self._usage
            self._choices.update(c.get("index", 0) for c in body.get("choices") or ())
        elif b'"index":0' not in data:  # another choice's chunk (n > 1)
            body = json.loads(data)
            self._choices.update(c.get("index", 0) for c in body.get("choices") or ())

    def _note_message(self, name: bytes, data: bytes) -> None:
        if name == b"content_block_delta":
            self._deltas += 1
        elif name == b"content_block_start":
            self._open_blocks.append(json.loads(data)["index"])
        elif name == b"content_block_stop":
            index = json.loads(data)["index"]
            self._open_blocks = [i for i in self._open_blocks if i != index]
        elif name == b"message_start":
            self._first = json.loads(data)["message"]

    def _note_response(self, name: bytes, data: bytes) -> None:
        if name == b"response.output_text.delta":
            self._deltas += 1
        elif name == b"response.created":
            self._first = json.loads(data)["response"]
        if b'"sequence_number":' in data:
            self._sequence += 1

    # -- closing ----------------------------------------------------------------------

    def _end_completion(self) -> bytes:
        first = self._first or {}
        chat = self._form is TextForm.CHAT
        gap: dict[str, Any] = {"delta": {}} if chat else {"text": ""}
        choices = [
            {"index": index, **gap, "logprobs": None, "finish_reason": EVICTED}
            for index in sorted(self._choices or {0})
        ]
        body = {
            "id": first.get("id", ""),
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": first.get("created", int(time.time())),
            "model": first.get("model", ""),
            "choices": choices,
        }
        closing = event(body)
        if self._usage is not None:  # the closing usage chunk, as the engine sends it
            closing += event({**body, "choices": [], "usage": self._usage})
        return closing + b"data: [DONE]\n\n"

    def _end_message(self) -> bytes:
        closing: list[tuple[str, dict[str, Any]]] = [
            ("content_block_stop", {"index": index}) for index in self._open_blocks
        ]
        usage = {"output_tokens": self._deltas}
        delta = {"stop_reason": MESSAGE_STOP_REASON, "stop_sequence": None}
        closing += [("message_delta", {"delta": delta, "usage": usage}), ("message_stop", {})]
        return b"".join(event({"type": name, **fields}, name) for name, fields in closing)

    def _end_response(self) -> bytes:
        response = dict(self._first or {"object": "response", "output": []})
        opening_usage = response.get("usage") or {}
        response.update(
            status="incomplete",
            incomplete_details={"reason": EVICTED},
            usage={
                "input_tokens": opening_usage.get("input_tokens", 0),
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": self._deltas,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": opening_usage.get("input_tokens", 0) + self._deltas,
            },
        )
        name = "response.incomplete"
        fields = {"type": name, "sequence_number": self._sequence, "response": response}
        return event(fields, name)


def _parts(block: bytes) -> tuple[bytes, bytes | None]:
    """An event's name (b"" when unnamed) and its data."""
    name, data = b"", None
    for line in block.split(b"\n"):
        if line.startswith(_DATA):
            data = line[len(_DATA) :].strip()
        elif line.startswith(b"event: "):
            name = line[7:].strip()
    return name, data
