"""Checks an OpenAI request body the way the API would, before any GPU sees it.

Only what admission relies on or what would make vLLM fail is checked; fields this
module does not know pass through untouched for vLLM to judge.
"""

from __future__ import annotations

from typing import Any

from sidecar.request.openai_api.request import CompletionRequest, Endpoint, InvalidRequest


def validate(request: CompletionRequest) -> None:
    body = request.body
    _optional(body, "model", str, "a string")
    _optional(body, "stream", bool, "a boolean")
    _optional(body, "stream_options", dict, "an object")
    _optional(body, "tools", list, "an array")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (not _is_int(value) or value < 1):
            raise InvalidRequest(f"'{key}' must be an integer of at least 1.", key)
    if request.endpoint is Endpoint.CHAT:
        validate_messages(body.get("messages"))
    else:
        _validate_prompt(body.get("prompt"))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional(body: dict[str, Any], key: str, kind: type, described: str) -> None:
    value = body.get(key)
    if value is not None and not isinstance(value, kind):
        raise InvalidRequest(f"'{key}' must be {described}.", key)


def validate_messages(messages: Any, name: str = "messages") -> None:
    if messages is None:
        raise InvalidRequest(f"'{name}' is required.", name)
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(f"'{name}' must be a non-empty array.", name)
    for index, message in enumerate(messages):
        where = f"{name}[{index}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"'{where}' must be an object.", where)
        if not isinstance(message.get("role"), str):
            raise InvalidRequest(f"'{where}.role' must be a string.", f"{where}.role")
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise InvalidRequest(
                f"'{where}.content' must be a string or an array of parts.", f"{where}.content"
            )
        for part_index, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                part_where = f"{where}.content[{part_index}]"
                raise InvalidRequest(f"'{part_where}' must be an object with a 'type'.", part_where)


def _validate_prompt(prompt: Any) -> None:
    if prompt is None:
        raise InvalidRequest("'prompt' is required.", "prompt")
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt) or all(_is_int(p) for p in prompt):
            return
        if all(isinstance(p, list) and p and all(_is_int(t) for t in p) for p in prompt):
            return
    raise InvalidRequest(
        "'prompt' must be a string, an array of strings, or an array of token ids.", "prompt"
    )
