"""The record of every change to what the sidecars obey: the mode, the configuration, the
tenants and their keys, and the SLO controller's shares. Who made it (`Actor`: a name,
and how it came), when, and what changed, field by field, old → new. Never a key: a key
shows only as added, moved or revoked.

The operators' changes (the CLI, the dashboard, files, a put back) are kept in one
bounded list, written in the same transaction as the change itself; the controller's
moves in their own (config/store.py), so a busy controller never pushes an operator's
switch out of the record. `qos-sidecar audit` reads both, newest first.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

MAX_BY = 64  # characters of a name kept
MAX_VALUE = 200  # characters of a value kept: a long list is recorded cut, not whole
MAX_CHANGES = 40  # fields recorded of one change (an import may change hundreds)


@dataclass(frozen=True)
class Changed:
    """One field: its value before and after (None: it had none, or has none now)."""

    field: str
    old: str | None
    new: str | None

    def describe(self) -> str:
        return f"{self.field}: {_shown(self.old)} -> {_shown(self.new)}"


@dataclass(frozen=True)
class AuditEntry:
    kind: str  # "mode", "config", "tenant", "tenants", "shares", "put-back"
    what: str  # "mode core-only", "shed p2", "tenant acme added", "configuration set"
    by: str  # who: a name given, else the user and host, "file", "controller"
    via: str  # "cli", "dashboard", "api", "file", "controller", "sidecar", "python"
    changes: tuple[Changed, ...] = ()
    at: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changes": [asdict(change) for change in self.changes]}

    @classmethod
    def from_json(cls, text: str | bytes) -> AuditEntry | None:
        """A stored entry, or None for one this version cannot read."""
        try:
            data = json.loads(text)
            changes = tuple(
                Changed(str(c["field"]), _optional(c["old"]), _optional(c["new"]))
                for c in data.get("changes", ())
            )
            return cls(
                str(data["kind"]),
                str(data["what"]),
                str(data["by"]),
                str(data["via"]),
                changes,
                float(data["at"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def describe_head(self) -> str:
        return f"{utc(self.at)} {self.what} by {self.by} via {self.via}"

    def describe(self) -> str:
        """The whole record in one line."""
        return "; ".join([self.describe_head(), *(c.describe() for c in self.changes)])


@dataclass(frozen=True)
class Actor:
    """Who makes a change, and how it came to the store."""

    by: str
    via: str

    def entry(self, kind: str, what: str, changes: tuple[Changed, ...] = ()) -> AuditEntry:
        return AuditEntry(kind, what, self.by, self.via, bounded(changes))


def bounded(changes: tuple[Changed, ...]) -> tuple[Changed, ...]:
    """What a record keeps of a change: its first fields, each value cut to MAX_VALUE."""
    kept = tuple(
        Changed(change.field, _cut(change.old), _cut(change.new))
        for change in changes[:MAX_CHANGES]
    )
    left = len(changes) - MAX_CHANGES
    return kept + ((Changed("…", None, f"{left} more fields"),) if left > 0 else ())


def who() -> str:
    """The person at this terminal, as user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a bare container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def clean_name(name: object) -> str:
    """A name someone gave, fit to show: printable, one line, at most MAX_BY characters."""
    if not isinstance(name, str):
        return ""
    return "".join(ch for ch in name if ch.isprintable()).strip()[:MAX_BY]


# A change made through ConfigStore by a program of its own (tests, tools).
PROGRAM = Actor(who(), "python")
FILE = "file"
CONTROLLER = Actor("controller", "controller")


def controller_entry(move: Mapping[str, Any]) -> AuditEntry | None:
    """A move of the SLO controller's (config/store.py keeps them) as a record: the
    pool's shares, old → new, and why; None for one this version cannot read."""
    try:
        shares, before = move["shares"], move.get("before") or {}
        changed = tuple(
            Changed(f"{tier} share", _optional(before.get(tier)), str(shares[tier]))
            for tier in sorted(shares)
        )
        what = f"shares of pool {move.get('pool', 'default')}: {move['reason']}"
        return AuditEntry("shares", what, CONTROLLER.by, CONTROLLER.via, changed, move["at"])
    except (KeyError, TypeError, AttributeError):
        return None


def differences(old: Any, new: Any, at: str = "") -> tuple[Changed, ...]:
    """The dotted fields whose values differ, each with both values as JSON (None where a
    field is missing on one side)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        found: list[Changed] = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{at}.{key}" if at else str(key)
            found += differences(old.get(key), new.get(key), path)
        return tuple(found)
    if old == new:
        return ()
    return (Changed(at, _value(old), _value(new)),)


def utc(at: float) -> str:
    """An ISO-8601 UTC time to the second."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _value(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), sort_keys=True)


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_VALUE:
        return text
    return text[: MAX_VALUE - 1] + "…"


def _optional(value: Any) -> str | None:
    return None if value is None else str(value)


def _shown(value: str | None) -> str:
    return "-" if value is None else value
