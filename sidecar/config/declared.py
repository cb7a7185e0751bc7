"""What files declare, written into the store by the sidecars that read them: the document
and the tenants with their keys, each only while what the store holds differs from the
file (every sidecar reads the same mounted files: the first writes, the others find it
written), and only into the store the sidecar read (StoreLost otherwise)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

import redis.asyncio as redis

from sidecar.config.audit import FILE, MAX_CHANGES, Actor, AuditEntry, Changed, differences
from sidecar.config.base import Strict
from sidecar.config.files import Declared, DeclaredTenants
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
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
    StoreLost,
    tenant_keys_key,
)

FILE_ACTOR = Actor(FILE, FILE)
DECLARE = resources.files("sidecar.config").joinpath("declare_tenants.lua").read_text()


async def write_config(store: ConfigStore, held: Snapshot, config: QosConfig, path: str) -> bool:
    """The document `path` declares, unless the store holds it; True when written."""
    if held.config == config and held.declared_config == path:
        return False
    await store.save_config(
        config, held.store_id, declared_by=path, actor=FILE_ACTOR, whole=store.whole
    )
    return True


class StoreMoved(Exception):
    """The store changed since a tenants file's plan was made: nothing was written; plan
    again against what the store now holds."""


@dataclass(frozen=True)
class TenantsPlan:
    """What applying a tenants file would do to the store as held: worked out where the
    file is read (config/file_reader.py), for thousands of tenants take a good part of a
    second to compare and write out, which the sidecar's event loop does not spend."""

    store_id: str  # the store and version it was made against
    version: int
    revoked: Revoked
    max_revoked_share: float | None  # the share the file itself allows, if it says
    in_force: bool  # the store holds it so already: nothing to write
    tenants: str = ""  # the change as declare_tenants.lua takes it (JSON)
    entry: str = ""  # the record of the change (JSON)


def plan(held: Snapshot, file: DeclaredTenants, path: str) -> TenantsPlan:
    against = (held.store_id, held.version)
    taken = revoked(held, file.tenants, path)
    if in_force(held, file.tenants, path):
        return TenantsPlan(*against, taken, file.max_revoked_share, in_force=True)
    tenants, entry = _declaration(held, file.tenants, path)
    return TenantsPlan(*against, taken, file.max_revoked_share, False, tenants, entry)


class HeldTenants(Strict):
    """What a plan needs of the snapshot held, sent to the process that reads the file."""

    version: int
    store_id: str
    tenants: dict[str, Tenant]
    api_keys: dict[str, str]
    declared_tenants: dict[str, str]

    @classmethod
    def of(cls, held: Snapshot) -> bytes:
        return (
            cls.model_construct(
                version=held.version,
                store_id=held.store_id,
                tenants=held.tenants,
                api_keys=held.api_keys,
                declared_tenants=held.declared_tenants,
            )
            .model_dump_json()
            .encode()
        )

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.version,
            tenants=self.tenants,
            store_id=self.store_id,
            api_keys=self.api_keys,
            declared_tenants=self.declared_tenants,
        )


async def write_tenants(client: redis.Redis, plan: TenantsPlan) -> bool:
    """The tenants a file declares, as `plan` changes the store it was made against,
    unless the store holds them so; True when written (StoreMoved: the store is past the
    version the plan was made against)."""
    if plan.in_force:
        return False
    result = await client.eval(
        DECLARE,
        6,
        STORE_KEY,
        TENANTS_KEY,
        API_KEYS_KEY,
        VERSION_KEY,
        DECLARED_TENANTS_KEY,
        AUDIT_KEY,
        plan.store_id,
        plan.version,
        tenant_keys_key(""),
        plan.tenants,
        plan.entry,
        AUDIT_KEPT,
    )
    outcome = result[0].decode() if isinstance(result[0], bytes) else result[0]
    if outcome == "lost":
        raise StoreLost(f"Redis no longer holds the store {plan.store_id}")
    if outcome == "moved":
        raise StoreMoved(f"the store moved past version {plan.version} since the plan")
    await client.publish(CHANGED_CHANNEL, str(int(result[1])))
    return True


def _declaration(held: Snapshot, declared: Mapping[str, Declared], path: str) -> tuple[str, str]:
    """What declare_tenants.lua changes in the store as held (JSON), and the record of it."""
    keys_of = _keys_of(held)
    change = {
        "records": {
            name: tenant.record.model_dump_json()
            for name, tenant in declared.items()
            if held.tenants.get(name) != tenant.record
        },
        "keys": {
            name: sorted(tenant.digests)
            for name, tenant in declared.items()
            if keys_of[name] != tenant.digests
        },
        "owned": {name: path for name in declared if held.declared_tenants.get(name) != path},
        "removed": [
            name
            for name, owner in held.declared_tenants.items()
            if owner == path and name not in declared
        ],
    }
    return json.dumps(change), tenants_entry(held, declared, path).to_json()


def tenants_entry(held: Snapshot, declared: Mapping[str, Declared], path: str) -> AuditEntry:
    """The record of applying `path`'s tenants over what the store held: per tenant, its
    fields and its number of keys, old → new (never a key). Past what a record keeps,
    the tenants changed are counted, not compared field by field."""
    keys_of = _keys_of(held)
    gone = {name for name, owner in held.declared_tenants.items() if owner == path}
    changed: tuple[Changed, ...] = ()
    more = 0
    for name in sorted(set(declared) | gone):
        tenant = declared.get(name)
        old = held.tenants.get(name)
        if tenant is not None and old == tenant.record and keys_of[name] == tenant.digests:
            continue
        if len(changed) >= MAX_CHANGES - 1:
            more += 1
            continue
        before = {**old.model_dump(mode="json"), "keys": len(keys_of[name])} if old else {}
        after = (
            {**tenant.record.model_dump(mode="json"), "keys": len(tenant.digests)} if tenant else {}
        )
        changed += differences({name: before}, {name: after})
    if more:
        changed = (*changed[: MAX_CHANGES - 1], Changed("…", None, f"{more} more tenants"))
    return FILE_ACTOR.entry("tenants", f"tenants from {path}", changed)


def in_force(held: Snapshot, declared: Mapping[str, Declared], path: str) -> bool:
    """Whether the store holds the tenants `path` declares, as it declares them."""
    keys_of = _keys_of(held)
    for name, tenant in declared.items():
        if (
            held.tenants.get(name) != tenant.record
            or keys_of[name] != tenant.digests
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


def revoked(held: Snapshot, declared: Mapping[str, Declared], path: str) -> Revoked:
    """The tenants `path` declared in the store that `declared` leaves out (with them, all
    their keys: a key rotated within a tenant it keeps is no revocation)."""
    before = [name for name, owner in held.declared_tenants.items() if owner == path]
    return Revoked(sum(1 for name in before if name not in declared), len(before))


def _keys_of(held: Snapshot) -> dict[str, set[str]]:
    keys_of: dict[str, set[str]] = defaultdict(set)
    for digest, name in held.api_keys.items():
        keys_of[name].add(digest)
    return keys_of
