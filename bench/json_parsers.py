"""JSON parsers side by side on the bodies the sidecar reads: which to parse with.

Each candidate does what admission needs of a body: bytes in, a dict out, UTF-8 checked,
and the body's nesting bounded (bodies/limits.py's MAX_DEPTH). Measured on the ordinary
chat request of bench/gateway.py, a chat request with tools, and the long prompts of
bench/long_prompts.py; each body parsed in turn by every candidate, round after round,
the best round's time per parse shown (the least disturbed by the shared machine).

  json+scan      the standard library, the depth measured on the raw bytes first
                 (strings blanked out by a regular expression)
  json+walk      the standard library, the depth measured on the parsed containers
  orjson+walk    orjson, the depth measured on the parsed containers
  msgspec+walk   msgspec.json, the depth measured on the parsed containers

Run: .venv/bin/python bench/json_parsers.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from typing import Any

import gateway
import long_prompts
import msgspec
import orjson

MAX_DEPTH = 64
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def scan_depth(raw: bytes) -> None:
    depth = 0
    for byte in _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        depth = depth + 1 if byte in b"[{" else depth - 1
        if depth > MAX_DEPTH:
            raise ValueError("too deep")


def walk_depth(value: Any) -> None:
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError("too deep")
        level = [
            child
            for container in level
            for child in (container.values() if isinstance(container, dict) else container)
            if isinstance(child, dict | list)
        ]


def with_stdlib_scan(raw: bytes) -> dict:
    text = raw.decode("utf-8")
    scan_depth(raw)
    return json.loads(text)


def with_stdlib_walk(raw: bytes) -> dict:
    body = json.loads(raw.decode("utf-8"))
    walk_depth(body)
    return body


def with_orjson(raw: bytes) -> dict:
    body = orjson.loads(raw)
    walk_depth(body)
    return body


_MSGSPEC = msgspec.json.Decoder()


def with_msgspec(raw: bytes) -> dict:
    body = _MSGSPEC.decode(raw)
    walk_depth(body)
    return body


CANDIDATES: dict[str, Callable[[bytes], dict]] = {
    "json+scan": with_stdlib_scan,
    "json+walk": with_stdlib_walk,
    "orjson+walk": with_orjson,
    "msgspec+walk": with_msgspec,
}


def tools_body() -> dict[str, Any]:
    tool = {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up an order by its number and return its status.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order": {"type": "string", "description": "The order number"},
                    "fields": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["order"],
            },
        },
    }
    return {**gateway.BODY, "tools": [tool] * 8, "tool_choice": "auto"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    samples = {"ordinary": gateway.BODY, "tools": tools_body(), **long_prompts.bodies()}
    raws = {name: json.dumps(body).encode() for name, body in samples.items()}
    for name, raw in raws.items():  # every candidate reads every body alike
        parsed = [parse(raw) for parse in CANDIDATES.values()]
        assert all(p == parsed[0] for p in parsed), name
    best = {(n, c): float("inf") for n in raws for c in CANDIDATES}
    for _ in range(args.rounds):
        for name, raw in raws.items():
            times = max(1, 2_000_000 // len(raw))
            for candidate, parse in CANDIDATES.items():
                started = time.perf_counter()
                for _ in range(times):
                    parse(raw)
                spent = (time.perf_counter() - started) / times
                best[name, candidate] = min(best[name, candidate], spent)
    print(f"microseconds per parse, the best of {args.rounds} rounds (ratio to json+scan)")
    print(f"{'body':<10} {'bytes':>8}" + "".join(f"{c:>20}" for c in CANDIDATES))
    for name, raw in raws.items():
        base = best[name, "json+scan"]
        cells = "".join(
            f"{best[name, c] * 1e6:>11.1f} ({best[name, c] / base:>4.2f}x)" for c in CANDIDATES
        )
        print(f"{name:<10} {len(raw):>8}{cells}")


if __name__ == "__main__":
    main()
