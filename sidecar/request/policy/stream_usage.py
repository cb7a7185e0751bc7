"""What an admitted OpenAI stream asks of the engine for its usage, whatever its client
asked: the closing usage chunk, and a running count in every chunk (which outlasts a
client that leaves early), so its output is settled from the engine's own count, however
many tokens a chunk carries (`stream_interval`); and what Envoy's Lua filter takes back
out (the mode, in the exchange's metadata), so that the client's stream is the one it
asked for. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sidecar.request.bodies.parsed import StreamUsage

# The Lua filter's modes (envoy.yaml): read the usage; also take out the running counts;
# also take out the closing chunk (and put back the fingerprint it took from the last).
READ, RUNNING, ALL = "1", "running", "all"


@dataclass(frozen=True)
class UsageAsk:
    stream_options: dict[str, Any] | None  # sent upstream instead (None: as it came)
    mode: str


def usage_ask(asked: StreamUsage, options: object, choices: int, engine_forces: bool) -> UsageAsk:
    """`asked`: what the client asked (its `options`); `choices`: its `n`;
    `engine_forces`: the engines send every stream's usage unasked
    (--enable-force-include-usage), so the client gets it as it would without us."""
    # With several choices a chunk's running count is its choice's alone, not the total.
    running = choices == 1
    if engine_forces or (asked.final and (asked.continuous or not running)):
        return UsageAsk(None, READ)
    kept = options if isinstance(options, dict) else {}
    wanted = {**kept, "include_usage": True, "continuous_usage_stats": running}
    return UsageAsk(wanted, RUNNING if asked.final else ALL)
