"""The shape a body may have before any reader walks it: bounded, or refused with a 400.

Bodies are parsed by msgspec (bench/json_parsers.py: a tenth of the standard library's
time with the depth scan it needed on a 220 KB prompt, half on an ordinary request), in
one pass over the bytes that checks their UTF-8 too. Its parser recurses: a body nested
far deeper than any API allows stops it at Python's recursion limit, refused as too
deep; within that, the depth is counted on the parsed containers, a cost that grows
with their number, not with the length of the prompt's text. Every array a reader walks
is bounded in length.
"""

from __future__ import annotations

from typing import Any

import msgspec

# Deeper than any API's own documents (tool schemas, structured outputs) need.
MAX_DEPTH = 64
# Messages of a conversation, parts of a message, items of a Responses input,
# conversations of a batch, texts of an embeddings request.
MAX_ITEMS = 10_000
# Token ids a prompt may be given as: more than any model's context.
MAX_TOKEN_IDS = 1 << 20
# A model name longer than this names no model; it would only bloat logs and labels.
MAX_MODEL_CHARS = 256


class InvalidRequest(ValueError):
    """A request body its API cannot take: answered with a 400 in that API's shape."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


_DECODER = msgspec.json.Decoder()


def parse_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, within MAX_DEPTH."""
    try:
        body = _DECODER.decode(raw)
    except msgspec.DecodeError as error:
        raise _not_json(raw, error) from None
    except RecursionError:
        raise _too_deep() from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    check_depth(body)
    return body


def _not_json(raw: bytes, error: msgspec.DecodeError) -> InvalidRequest:
    """Why the body is refused: not UTF-8 at all (looked at only once it failed), or
    msgspec's reason ("JSON is malformed: invalid character (byte 5)")."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return InvalidRequest("The request body is not valid UTF-8.")
    reason = str(error).removeprefix("JSON is malformed: ").rstrip(".")
    return InvalidRequest(f"The request body is not valid JSON: {reason}.")


def check_depth(body: dict[str, Any]) -> None:
    """Level by level: each level's containers, the body's own the first."""
    level: list[Any] = [body]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise _too_deep()
        level = [
            child
            for container in level
            for child in (container.values() if isinstance(container, dict) else container)
            if isinstance(child, dict | list)
        ]


def _too_deep() -> InvalidRequest:
    return InvalidRequest(f"The request body is nested more than {MAX_DEPTH} levels deep.")


def bounded_list(
    value: Any, where: str, *, required: bool = False, most: int = MAX_ITEMS
) -> list[Any]:
    """`value` as a list of at most `most` items (None: empty, unless required)."""
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise InvalidRequest(f"'{where}' must be an array.", where)
    if len(value) > most:
        raise InvalidRequest(f"'{where}' has more than {most} items.", where)
    return value


def optional(body: dict[str, Any], key: str, kind: type | tuple[type, ...], described: str) -> Any:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise InvalidRequest(f"'{key}' must be {described}.", key)
    return value


def model_of(body: dict[str, Any]) -> str | None:
    model: str | None = optional(body, "model", str, "a string")
    if model is not None and len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest(f"'model' is longer than {MAX_MODEL_CHARS} characters.", "model")
    return model


def positive_int(body: dict[str, Any], key: str, where: str | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        name = where or key
        raise InvalidRequest(f"'{name}' must be an integer of at least 1.", name)
    return value
