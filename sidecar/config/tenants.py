"""Tenants and their API keys in Redis: each key belongs to one tenant.

A tenant's record and its key are written by one script (put_tenant.lua), so no crash
leaves half a tenant, and a key another tenant holds is refused, naming the holder,
unless it is moved on purpose. Removing a tenant revokes only the keys it holds.
Names are a safe character set (they show in listings, logs and metric labels); keys
are visible ASCII, no spaces.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from sidecar.config.audit import Actor, AuditEntry, Changed, differences

if TYPE_CHECKING:
    import redis.asyncio as redis

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
NAME_RULE = "1 to 128 of A-Z a-z 0-9 . _ : @ -, starting with a letter or digit"
KEY = re.compile(r"[\x21-\x7e]{1,512}")
KEY_RULE = "1 to 512 visible ASCII characters, no spaces"

_LUA = resources.files("sidecar.config")
PUT = _LUA.joinpath("put_tenant.lua").read_text()
REMOVE = _LUA.joinpath("remove_tenant.lua").read_text()


class StoreLost(Exception):
    """The store is not the one the writer read: Redis lost it (restarted empty, a
    master's data gone) or holds another. Nothing was written."""


class TenantInvalid(ValueError):
    """A tenant name or API key the store does not take."""


class KeyHeld(ValueError):
    """The API key belongs to another tenant."""

    def __init__(self, holder: str) -> None:
        super().__init__(f"that API key belongs to tenant {holder!r}")
        self.holder = holder


def check_name(name: str) -> None:
    if not NAME.fullmatch(name):
        raise TenantInvalid(f"tenant name {name!r}: {NAME_RULE}")


def check_api_key(api_key: str) -> None:
    if not KEY.fullmatch(api_key):
        raise TenantInvalid(f"an API key is {KEY_RULE}")


@dataclass(frozen=True)
class Put:
    version: int
    moved_from: str | None  # the tenant the key was taken from


@dataclass(frozen=True)
class Keys:
    """A script's keys: the tenant's own (tenants, API keys, its key set, version,
    identity), and the record of changes with how many it keeps."""

    own: tuple[str, str, str, str, str]
    audit: str
    kept: int


@dataclass(frozen=True)
class Attempt:
    """One try at writing a tenant, as things stood when it was read."""

    name: str
    record: str  # the tenant's JSON
    digest: str  # the key's SHA-256 ("" for none)
    holder: str | None  # who held the key when read
    move_key: bool
    store: str  # the identity of the store written to
    before: bytes | str | None  # the tenant's record when read (None: a new tenant)
    entry: AuditEntry


async def put(client: redis.Redis, keys: Keys, holder_keys: str, attempt: Attempt) -> Put | None:
    """One attempt; None when the key's holder or the tenant changed since they were
    read (read again)."""
    result = await client.eval(
        PUT,
        7,
        *keys.own,
        holder_keys,
        keys.audit,
        attempt.name,
        attempt.record,
        attempt.digest,
        attempt.holder or "",
        "1" if attempt.move_key else "0",
        attempt.store,
        _text(attempt.before or ""),
        attempt.entry.to_json(),
        keys.kept,
    )
    outcome = _text(result[0])
    if outcome == "lost":
        raise StoreLost(f"Redis no longer holds the store {attempt.store}")
    if outcome == "retry":
        return None
    if outcome == "held":
        raise KeyHeld(_text(result[1]))
    holder = attempt.holder
    return Put(int(result[1]), holder if holder and holder != attempt.name else None)


async def remove(
    client: redis.Redis,
    keys: Keys,
    name: str,
    store: str,
    before: bytes | str | None,
    entry: AuditEntry,
) -> tuple[bool, int] | None:
    """One attempt; None when the tenant changed since it was read (read again)."""
    result = await client.eval(
        REMOVE,
        6,
        *keys.own,
        keys.audit,
        name,
        store,
        _text(before or ""),
        entry.to_json(),
        keys.kept,
    )
    outcome = _text(result[0]) if isinstance(result[0], bytes | str) else None
    if outcome == "lost":
        raise StoreLost(f"Redis no longer holds the store {store}")
    if outcome == "retry":
        return None
    existed, version = result
    return bool(existed), int(version)


def put_entry(
    actor: Actor,
    name: str,
    before: bytes | str | None,
    record: str,
    digest: str,
    holder: str | None,
) -> AuditEntry:
    """The record of a tenant added or changed: its fields, old → new, and whether a key
    came with it (never the key)."""
    changed = differences(_fields(before), json.loads(record))
    if digest and holder != name:
        key = f"moved from tenant {holder}" if holder else "added"
        changed += (Changed("api key", None, key),)
    verb = "added" if before is None else "changed"
    return actor.entry("tenant", f"tenant {name} {verb}", changed)


def remove_entry(actor: Actor, name: str, before: bytes | str | None) -> AuditEntry:
    changed = (*differences(_fields(before), {}), Changed("api keys", None, "revoked"))
    return actor.entry("tenant", f"tenant {name} removed", changed)


def _fields(record: bytes | str | None) -> dict:
    try:
        found = json.loads(record) if record else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
