"""What the model server schedules a request by besides its prompt: ours to set, never
the client's. Pure: no I/O.

vLLM 0.33 takes scheduling instructions from whoever sends the request:
- the `X-Vllm-Priority` header, an integer that overrides the body's `priority`
  (vllm/entrypoints/generate/base/serving.py, `_get_priority`; a value that is not an
  integer is ignored and the body's counts);
- the `X-data-parallel-rank` header, which pins the request to one data-parallel engine;
- the body's `priority` (lower runs first under `--scheduling-policy priority`; ignored,
  silently, under the default fcfs).

So an admitted request loses every `x-vllm-*` header and `x-data-parallel-rank` a client
sent, and its body's `priority`. With `engine.send_priority` on, the tier's priority goes
in both ways vLLM reads it: the header, which vLLM reads as the final word, and the body,
for releases that predate the header.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PRIORITY_HEADER = "x-vllm-priority"
# Read by vLLM from any client, and able to change where or when a request runs.
CONTROL_HEADERS = (PRIORITY_HEADER, "x-data-parallel-rank")
# Any header a later vLLM may read by this prefix is not the client's to send either
# (admission/answer.py strips them).
VLLM_HEADER_PREFIX = "x-vllm-"


@dataclass(frozen=True)
class EngineFields:
    """What goes to the engine: a replacement body (None: the body is fine as it is) and
    headers to set."""

    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def engine_fields(
    body: dict[str, Any] | None,
    changed: bool,
    send_priority: bool,
    tier_priority: int,
    body_priority: bool = True,
) -> EngineFields:
    """The body (`changed`: already rewritten by the guards; None: a body that is not
    JSON, forwarded as it came) and headers that carry the tier's priority when
    `send_priority`, and no priority the client chose. `body_priority`: the API's body
    takes a `priority` (else only the header carries it)."""
    headers = {PRIORITY_HEADER: str(tier_priority)} if send_priority else {}
    if body is None:
        return EngineFields(None, headers)
    if send_priority and body_priority:
        return EngineFields({**body, "priority": tier_priority}, headers)
    if "priority" in body:
        without = {key: value for key, value in body.items() if key != "priority"}
        return EngineFields(without, headers)
    return EngineFields(body if changed else None, headers)
