"""Redis is never the only memory of the configuration. Every sidecar holds the last good
snapshot it loaded: the document, the mode, the SLO controller's shares, the tenants and
their API keys' hashes, and which of them files declare. One that finds the store lost
puts that snapshot back.

Lost: the store holds no document or no identity (Redis restarted empty, a cluster
master's data gone), its version fell below the one held (a lagging replica promoted, an
old backup restored), or it carries a newer identity than the one held (a store made
anew over a lost one, by a sidecar or a command that held nothing). A store with an
older identity than the one held is the one the rest of the fleet kept: it is loaded.

Lost in part: the store is the one held, at the version held, but what operators set is
not what was read (a key deleted by hand or evicted, a value changed behind the version):
its checksum (checksum.py) is neither the one the sidecar read with its version nor the
one recorded for that version. Every sidecar checks the store as a whole (read in pages,
never holding Redis for long) every CHECK_SECONDS, or less often where a check takes
long (a hundred times its own time), and records the checksum it holds for its version;
the commands check the store against that record before they read.

The snapshot goes back in one script that writes only while the store is still lost as
its holder sees it: the first sidecar to try writes it, the others find it back and do
nothing (a sidecar that held a later version finds the store behind it and puts its own
back), with the record of changes (config/audit.py) and the controller's moves, and a
record of its own saying so. Budgets restart full.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
from dataclasses import dataclass
from importlib import resources

import redis.asyncio as redis

from sidecar.config import checksum
from sidecar.config.audit import PROGRAM, Actor, AuditEntry, Changed
from sidecar.config.snapshot import Snapshot
from sidecar.config.store import (
    ADJUSTMENTS_KEY,
    API_KEYS_KEY,
    AUDIT_KEPT,
    AUDIT_KEY,
    CHANGED_CHANNEL,
    CHECKED_HASHES,
    CHECKED_STRINGS,
    CHECKSUM_KEY,
    DECLARED_CONFIG_KEY,
    DECLARED_TENANTS_KEY,
    DOC_KEY,
    GOOD_DOC_KEY,
    MODE_KEY,
    SHARES_KEY,
    STORE_KEY,
    TENANTS_KEY,
    VERSION_KEY,
    tenant_keys_key,
)

_LUA = resources.files("sidecar.config")
PUT_BACK = _LUA.joinpath("put_back.lua").read_text()
RECORD = _LUA.joinpath("record_checksum.lua").read_text()
# How often each sidecar checks the store as a whole (a full read of it inside Redis).
CHECK_SECONDS = 2.0


@dataclass(frozen=True)
class StoreState:
    version: int
    identity: str  # "" when the store has none
    has_document: bool


async def read_state(client: redis.Redis) -> StoreState:
    async with client.pipeline(transaction=True) as pipe:
        pipe.get(VERSION_KEY)
        pipe.get(STORE_KEY)
        pipe.exists(DOC_KEY)
        version, identity, document = await pipe.execute()
    text = identity.decode() if isinstance(identity, bytes) else identity
    return StoreState(int(version or 0), text or "", bool(document))


@dataclass(frozen=True)
class StateCheck:
    """The store as a whole, as read in one check."""

    version: int
    identity: str
    digest: str  # the checksum of what it holds now
    recorded: str  # "<version>:<checksum>:<nonce>" recorded for a version ("": none)

    def recorded_for(self, version: int) -> str | None:
        """The checksum recorded for `version`, if that is the version recorded."""
        at, _, rest = self.recorded.partition(":")
        return rest.partition(":")[0] if at == str(version) else None

    @property
    def partial(self) -> bool:
        """Whether what it holds is not what was recorded for its version (a part lost or
        changed behind it), as anyone can tell without a copy of their own."""
        recorded = self.recorded_for(self.version)
        return recorded is not None and recorded != self.digest


async def check(client: redis.Redis) -> StateCheck | None:
    """The store as a whole; None when its version moved while it was read (a change:
    the watcher loads it)."""
    async with client.pipeline(transaction=True) as pipe:
        for key in (VERSION_KEY, STORE_KEY, CHECKSUM_KEY, *CHECKED_STRINGS):
            pipe.get(key)
        version, identity, recorded, *strings = await pipe.execute()
    hashes = [await _entries(client, key) for key in CHECKED_HASHES]
    if await client.get(VERSION_KEY) != version:
        return None
    digest = await asyncio.to_thread(checksum.of, strings, hashes)
    return StateCheck(int(version or 0), _text(identity or b""), digest, _text(recorded or b""))


async def whole(client: redis.Redis) -> bool:
    """Whether the store holds what was recorded for its version (or moved meanwhile: a
    change, whose writer found it whole)."""
    found = await check(client)
    return found is None or not found.partial


async def _entries(client: redis.Redis, key: str) -> dict[bytes, bytes]:
    """A hash read in pages (HSCAN): Redis is not held for a large one."""
    return {field: value async for field, value in client.hscan_iter(key, count=500)}


async def record(client: redis.Redis, held: Snapshot) -> None:
    """Record `held`'s checksum for its version, while the store is at that version."""
    await client.eval(
        RECORD, 2, VERSION_KEY, CHECKSUM_KEY, str(held.version), held.digest, secrets.token_hex(4)
    )


def partly_lost(held: Snapshot, found: StateCheck) -> bool:
    """Whether the store is the version `held` was read from but holds something else that
    no put back recorded."""
    if not held.digest or found.digest == held.digest:
        return False
    if (found.identity, found.version) != (held.store_id, held.version):
        return False  # another version: loaded, or lost as a whole
    return found.recorded_for(held.version) != found.digest


def put_back_entry(
    held: Snapshot, found: StoreState | StateCheck | None, actor: Actor
) -> AuditEntry:
    if isinstance(found, StateCheck):
        changed: tuple[Changed, ...] = (Changed("parts", "lost or changed", "put back"),)
    elif found:
        changed = (
            Changed("store", found.identity or None, held.store_id),
            Changed("version", str(found.version), str(held.version)),
        )
    else:
        changed = ()
    return actor.entry("put-back", "configuration put back", changed)


def lost(held: Snapshot, state: StoreState) -> bool:
    """Whether the store lost what `held` was loaded from (put_back.lua decides alike)."""
    if held.version == 0 or not held.store_id:
        return False  # nothing held to put back
    if not state.has_document or not state.identity:
        return True
    if state.identity == held.store_id:
        return state.version < held.version
    return state.identity > held.store_id


async def put_back(
    client: redis.Redis,
    held: Snapshot,
    found: StoreState | StateCheck | None = None,
    actor: Actor = PROGRAM,
) -> Snapshot | None:
    """Write `held` back if the store is still lost, in whole or in part; the snapshot as
    written (its checksum as it now stands) when this call wrote it, else None. The record
    of it says what the store was `found` to hold, and by whom."""
    names = sorted(held.tenants)
    keys = [
        STORE_KEY,
        DOC_KEY,
        GOOD_DOC_KEY,
        MODE_KEY,
        SHARES_KEY,
        TENANTS_KEY,
        API_KEYS_KEY,
        VERSION_KEY,
        DECLARED_CONFIG_KEY,
        DECLARED_TENANTS_KEY,
        AUDIT_KEY,
        ADJUSTMENTS_KEY,
        CHECKSUM_KEY,
        *(tenant_keys_key(name) for name in names),
    ]
    shares = (
        json.dumps(
            {
                pool: {tier.value: share for tier, share in moved.items()}
                for pool, moved in held.shares.items()
            }
        )
        if held.shares
        else ""
    )
    tenants = {name: tenant.model_dump_json() for name, tenant in held.tenants.items()}
    document, mode = held.config.model_dump_json(), held.mode.model_dump_json()
    digest = checksum.of_texts(
        (document, mode, shares or None, held.declared_config),
        (tenants, held.api_keys, held.declared_tenants),
    )
    partial = isinstance(found, StateCheck)
    written = await client.eval(
        PUT_BACK,
        len(keys),
        *keys,
        held.store_id,
        held.version,
        document,
        mode,
        shares,
        json.dumps(tenants),
        json.dumps(held.api_keys),
        json.dumps(names),
        held.declared_config or "",
        json.dumps(held.declared_tenants),
        json.dumps(list(held.audit)),
        json.dumps(list(held.moves)),
        put_back_entry(held, found, actor).to_json(),
        AUDIT_KEPT,
        digest,
        found.recorded if isinstance(found, StateCheck) else "",
        "1" if partial else "0",
        secrets.token_hex(4),
    )
    if not written:
        return None
    await client.publish(CHANGED_CHANNEL, str(held.version))
    return dataclasses.replace(held, digest=digest)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
