"""Tenants and their API keys in Redis: each key belongs to one tenant.

A tenant's record and its key are written by one script (put_tenant.lua), so no crash
leaves half a tenant, and a key another tenant holds is refused, naming the holder,
unless it is moved on purpose. Removing a tenant revokes only the keys it holds.
Names are a safe character set (they show in listings, logs and metric labels); keys
are visible ASCII, no spaces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

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


async def put(
    client: redis.Redis,
    keys: tuple[str, str, str, str, str],
    holder_keys: str,
    name: str,
    record: str,
    digest: str,
    holder: str | None,
    move_key: bool,
    store: str,
) -> Put | None:
    """One attempt; None when the key's holder changed since it was read (read again)."""
    moving = "1" if move_key else "0"
    result = await client.eval(
        PUT, 6, *keys, holder_keys, name, record, digest, holder or "", moving, store
    )
    outcome = _text(result[0])
    if outcome == "lost":
        raise StoreLost(f"Redis no longer holds the store {store}")
    if outcome == "retry":
        return None
    if outcome == "held":
        raise KeyHeld(_text(result[1]))
    return Put(int(result[1]), holder if holder and holder != name else None)


async def remove(
    client: redis.Redis, keys: tuple[str, str, str, str, str], name: str, store: str
) -> tuple[bool, int]:
    result = await client.eval(REMOVE, 5, *keys, name, store)
    if _text(result[0]) == "lost":
        raise StoreLost(f"Redis no longer holds the store {store}")
    existed, version = result
    return bool(existed), int(version)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
