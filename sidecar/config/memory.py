"""Redis is never the only memory of the configuration. Every sidecar holds the last good
snapshot it loaded: the document, the mode, the SLO controller's shares, the tenants and
their API keys' hashes, and which of them files declare. One that finds the store lost
puts that snapshot back.

Lost: the store holds no document or no identity (Redis restarted empty, a cluster
master's data gone), its version fell below the one held (a lagging replica promoted, an
old backup restored), or it carries a newer identity than the one held (a store made
anew over a lost one, by a sidecar or a command that held nothing). A store with an
older identity than the one held is the one the rest of the fleet kept: it is loaded.

The snapshot goes back in one script that writes only while the store is still lost as
its holder sees it: the first sidecar to try writes it, the others find it back and do
nothing (a sidecar that held a later version finds the store behind it and puts its own
back), with the record of changes (config/audit.py) and the controller's moves, and a
record of its own saying so. Budgets restart full.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import redis.asyncio as redis

from sidecar.config.audit import PROGRAM, Actor, AuditEntry, Changed
from sidecar.config.store import (
    ADJUSTMENTS_KEY,
    API_KEYS_KEY,
    AUDIT_KEPT,
    AUDIT_KEY,
    CHANGED_CHANNEL,
    DECLARED_CONFIG_KEY,
    DECLARED_TENANTS_KEY,
    DOC_KEY,
    GOOD_DOC_KEY,
    MODE_KEY,
    SHARES_KEY,
    STORE_KEY,
    TENANTS_KEY,
    VERSION_KEY,
    Snapshot,
    tenant_keys_key,
)

PUT_BACK = resources.files("sidecar.config").joinpath("put_back.lua").read_text()


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


def put_back_entry(held: Snapshot, found: StoreState | None, actor: Actor) -> AuditEntry:
    changed = (
        (
            Changed("store", found.identity or None, held.store_id),
            Changed("version", str(found.version), str(held.version)),
        )
        if found
        else ()
    )
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
    client: redis.Redis, held: Snapshot, found: StoreState | None = None, actor: Actor = PROGRAM
) -> bool:
    """Write `held` back if the store is still lost; True when this call wrote it. The
    record of it says what the store was `found` to hold, and by whom."""
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
    written = await client.eval(
        PUT_BACK,
        len(keys),
        *keys,
        held.store_id,
        held.version,
        held.config.model_dump_json(),
        held.mode.model_dump_json(),
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
    )
    if written:
        await client.publish(CHANGED_CHANNEL, str(held.version))
    return bool(written)
