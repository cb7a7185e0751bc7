"""The cluster's history in Redis: one hash a second (hash tag {qos-history}, one slot),
added to by every sidecar once a second and kept for the window and a little more."""

from __future__ import annotations

from importlib import resources

import redis.asyncio as redis

from sidecar.operator.history.window import SECONDS

PREFIX = "qos:{qos-history}:s:"
KEPT_SECONDS = SECONDS + 60
_LUA = resources.files("sidecar.operator.history")


class HistoryStore:
    def __init__(self, client: redis.Redis) -> None:
        self._record = client.register_script(_LUA.joinpath("record.lua").read_text())
        self._read = client.register_script(_LUA.joinpath("read.lua").read_text())

    async def add(self, counters: dict[str, float], gauges: dict[str, str]) -> int:
        """Add this sidecar's counters and gauges to the current second; returns it."""
        args: list[str | float | int] = [KEPT_SECONDS, len(counters)]
        for name, value in counters.items():
            args += [name, value]
        for name, text in gauges.items():
            args += [name, text]
        return int(await self._record(keys=[PREFIX], args=args))

    async def last(self, seconds: int, before: int = 0) -> tuple[int, dict[int, dict[str, str]]]:
        """Redis's current second, and what is kept of the `seconds` that end `before`
        seconds before it (0: with it)."""
        reply = await self._read(keys=[PREFIX], args=[seconds, before])
        now, rest = int(reply[0]), reply[1:]
        found = {}
        for second, flat in zip(rest[::2], rest[1::2], strict=True):
            found[int(second)] = {
                _text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)
            }
        return now, found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
