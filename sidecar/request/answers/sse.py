"""JSON and server-sent events as the APIs write them."""

from __future__ import annotations

import json
from typing import Any


def dumps(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def event(body: dict[str, Any], name: str | None = None) -> bytes:
    """One event; named (`event: NAME`) where the API names its events."""
    line = b"data: " + dumps(body) + b"\n\n"
    return (b"event: " + name.encode() + b"\n" + line) if name else line
