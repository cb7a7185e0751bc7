"""The shape a body may have before any reader walks it: bounded, or refused with a 400.

Python's JSON parser recurses: a body nested 100 000 levels deep raises RecursionError
(and a reader walking it would too). Depth is measured on the raw bytes first, strings
blanked out, at C speed; every array a reader walks is bounded in length.
"""

from __future__ import annotations

import json
import re
from typing import Any

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


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def parse_object(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, within MAX_DEPTH."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequest("The request body is not valid UTF-8.") from None
    check_depth(raw)
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc.msg}.") from None
    except RecursionError:  # within MAX_DEPTH this cannot happen; kept as the last word
        raise _too_deep() from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return body


def check_depth(raw: bytes) -> None:
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    depth = 0
    for byte in brackets:
        if byte in b"[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep()
        else:
            depth -= 1


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
