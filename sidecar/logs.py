"""Structured logs: one JSON object a line on stderr, for every logger in the process."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

from pythonjsonlogger.json import JsonFormatter


class UtcJsonFormatter(JsonFormatter):
    """`ts` in UTC, ISO 8601 with milliseconds and a Z: every log store reads it, and
    lines from machines in other zones sort together."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        moment = datetime.fromtimestamp(record.created, UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure(level: str = "INFO", component: str = "sidecar") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        UtcJsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "ts", "levelname": "level", "name": "logger"},
            static_fields={"component": component},
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log is one line a request: noise at our request rates.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
