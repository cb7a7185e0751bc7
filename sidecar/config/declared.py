"""What files declare, written into the store by the sidecars that read them: the document
and the tenants with their keys, each only while what the store holds differs from the
file (every sidecar reads the same mounted files: the first writes, the others find it
written), and only into the store the sidecar read (StoreLost otherwise)."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import redis.asyncio as redis

from sidecar.config.audit import FILE, Actor, AuditEntry, Changed, differences
from sidecar.config.files import DeclaredTenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import (
    API_KEYS_KEY,
    AUDIT_KEPT,
    AUDIT_KEY,
    CHANGED_CHANNEL,
    DECLARED_TENANTS_KEY,
    STORE_KEY,
    TENANTS_KEY,
    VERSION_KEY,
    ConfigStore,
    Snapshot,
    StoreLost,
    tenant_keys_key,
)

FILE_ACTOR = Actor(FILE, FILE)
DECLARE = resources.files("sidecar.config").joinpath("declare_tenants.lua").read_text()


async def write_config(store: ConfigStore, held: Snapshot, config: QosConfig, path: str) -> bool:
    """The document `path` declares, unless the store holds it; True when written."""
    if held.config == config and held.declared_config == path:
        return False
    await store.save_config(config, held.store_id, declared_by=path, actor=FILE_ACTOR)
    return True


async def write_tenants(
    client: redis.Redis, held: Snapshot, declared: Mapping[str, DeclaredTenant], path: str
) -> bool:
    """The tenants `path` declares, unless the store holds them so; True when written."""
    if in_force(held, declared, path):
        return False
    # Thousands of tenants take a good part of a second to write out: not on the loop
    # that decides requests.
    tenants, entry = await asyncio.to_thread(_declaration, held, declared, path)
    result = await client.eval(
        DECLARE,
        6,
        STORE_KEY,
        TENANTS_KEY,
        API_KEYS_KEY,
        VERSION_KEY,
        DECLARED_TENANTS_KEY,
        AUDIT_KEY,
        held.store_id,
        path,
        tenant_keys_key(""),
        tenants,
        entry,
        AUDIT_KEPT,
    )
    outcome = result[0].decode() if isinstance(result[0], bytes) else result[0]
    if outcome == "lost":
        raise StoreLost(f"Redis no longer holds the store {held.store_id}")
    await client.publish(CHANGED_CHANNEL, str(int(result[1])))
    return True


def _declaration(
    held: Snapshot, declared: Mapping[str, DeclaredTenant], path: str
) -> tuple[str, str]:
    """The declared tenants as the script takes them (JSON), and the record of the change."""
    tenants = {
        name: {"record": tenant.record().model_dump_json(), "digests": sorted(tenant.digests())}
        for name, tenant in declared.items()
    }
    return json.dumps(tenants), tenants_entry(held, declared, path).to_json()


def tenants_entry(held: Snapshot, declared: Mapping[str, DeclaredTenant], path: str) -> AuditEntry:
    """The record of applying `path`'s tenants over what the store held: per tenant, its
    fields and its number of keys, old → new (never a key)."""
    keys_of = _keys_of(held)
    gone = {name for name, owner in held.declared_tenants.items() if owner == path}
    changed: tuple[Changed, ...] = ()
    for name in sorted(set(declared) | gone):
        tenant = declared.get(name)
        old = held.tenants.get(name)
        before = {**old.model_dump(mode="json"), "keys": len(keys_of[name])} if old else {}
        after = (
            {**tenant.record().model_dump(mode="json"), "keys": len(tenant.digests())}
            if tenant
            else {}
        )
        changed += differences({name: before}, {name: after})
    return FILE_ACTOR.entry("tenants", f"tenants from {path}", changed)


def in_force(held: Snapshot, declared: Mapping[str, DeclaredTenant], path: str) -> bool:
    """Whether the store holds the tenants `path` declares, as it declares them."""
    keys_of = _keys_of(held)
    for name, tenant in declared.items():
        if (
            held.tenants.get(name) != tenant.record()
            or keys_of[name] != tenant.digests()
            or held.declared_tenants.get(name) != path
        ):
            return False
    gone = [name for name, owner in held.declared_tenants.items() if owner == path]
    return all(name in declared for name in gone)


@dataclass(frozen=True)
class Revoked:
    """The tenants applying a tenants file would remove of those it declared before."""

    tenants: int
    before: int

    def beyond(self, share: float) -> bool:
        """More than `share` of them, and more than one."""
        return self.tenants > 1 and self.tenants > share * self.before

    def __str__(self) -> str:
        return f"{self.tenants} of the {self.before} tenants it declared"


def revoked(held: Snapshot, declared: Mapping[str, DeclaredTenant], path: str) -> Revoked:
    """The tenants `path` declared in the store that `declared` leaves out (with them, all
    their keys: a key rotated within a tenant it keeps is no revocation)."""
    before = [name for name, owner in held.declared_tenants.items() if owner == path]
    return Revoked(sum(1 for name in before if name not in declared), len(before))


def _keys_of(held: Snapshot) -> dict[str, set[str]]:
    keys_of: dict[str, set[str]] = defaultdict(set)
    for digest, name in held.api_keys.items():
        keys_of[name].add(digest)
    return keys_of
