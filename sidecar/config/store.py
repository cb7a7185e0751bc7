"""The configuration, tenants and API keys in Redis.

Keys share the hash tag {qos-config}, so one MULTI can change a document, bump the
version and stay on one Redis Cluster slot. Every change increments the version and is
announced on a channel; sidecars reload on the announcement and also poll the version,
so a missed message is caught within the poll interval.

The store has an identity, made when it is first written. A writer that holds a
snapshot (a sidecar: the SLO controller, the dashboard) writes only to the store it
read, never to one that lost it (StoreLost: the sidecars put back what they hold,
config/recovery.py); a writer that holds none (a command) makes an empty store a new one.

    qos:{qos-config}:doc             the QosConfig document, JSON
    qos:{qos-config}:doc-good        the last document written through ConfigStore (it
                                     validated): what a sidecar started on a broken
                                     document serves
    qos:{qos-config}:mode            the OperatorMode, JSON
    qos:{qos-config}:shares          tier shares set by the SLO controller per pool, JSON
                                     {pool: {tier: share}} (none: the document's own)
    qos:{qos-config}:adjustments     the controller's last adjustments, newest first, JSON
    qos:{qos-config}:audit           the last changes made by anyone else, newest first,
                                     JSON (config/audit.py), each written with its change
    qos:{qos-config}:version         incremented on every change
    qos:{qos-config}:store           the store's identity: set when it is first written
    qos:{qos-config}:declared-config the file the document comes from, when a file does
    qos:{qos-config}:declared-tenants hash: tenant name → the file that declares it
    qos:{qos-config}:tenants         hash: tenant name → Tenant JSON
    qos:{qos-config}:apikeys         hash: SHA-256 of an API key → tenant name
    qos:{qos-config}:tenant-keys:N   set: the key hashes of tenant N
    qos:{qos-config}:checksum        "<version>:<sha256>:<nonce>": the checksum of what
                                     operators set (checksum.py), recorded for that
                                     version, so a part lost behind it is told (recovery.py)
    qos:config:changed               pub/sub channel, message: the new version
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

import redis.asyncio as redis
from pydantic import ValidationError

from sidecar.config import checksum, tenants
from sidecar.config.audit import PROGRAM, Actor, AuditEntry, controller_entry, differences
from sidecar.config.base import Tier, describe
from sidecar.config.operator_state import OperatorMode, Tenant
from sidecar.config.pools import DEFAULT_POOL
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot, hash_api_key
from sidecar.config.tenants import StoreLost

_PREFIX = "qos:{qos-config}"
DOC_KEY = f"{_PREFIX}:doc"
GOOD_DOC_KEY = f"{_PREFIX}:doc-good"
MODE_KEY = f"{_PREFIX}:mode"
SHARES_KEY = f"{_PREFIX}:shares"
ADJUSTMENTS_KEY = f"{_PREFIX}:adjustments"
ADJUSTMENTS_KEPT = 100
AUDIT_KEY = f"{_PREFIX}:audit"
AUDIT_KEPT = 200
VERSION_KEY = f"{_PREFIX}:version"
TENANTS_KEY = f"{_PREFIX}:tenants"
API_KEYS_KEY = f"{_PREFIX}:apikeys"
STORE_KEY = f"{_PREFIX}:store"
DECLARED_CONFIG_KEY = f"{_PREFIX}:declared-config"
DECLARED_TENANTS_KEY = f"{_PREFIX}:declared-tenants"
CHECKSUM_KEY = f"{_PREFIX}:checksum"
CHANGED_CHANNEL = "qos:config:changed"
# What the checksum covers (checksum.py), in its order: strings, then hashes.
CHECKED_STRINGS = (DOC_KEY, MODE_KEY, SHARES_KEY, DECLARED_CONFIG_KEY)
CHECKED_HASHES = (TENANTS_KEY, API_KEYS_KEY, DECLARED_TENANTS_KEY)


OPEN_STORE = resources.files("sidecar.config").joinpath("open_store.lua").read_text()


def new_identity() -> str:
    """A store's identity: it orders stores by when they were made (then by chance)."""
    return f"{time.time_ns() // 1_000_000:013d}-{secrets.token_hex(4)}"


def tenant_keys_key(tenant: str) -> str:
    return f"{_PREFIX}:tenant-keys:{tenant}"


REPAIR_HINT = (
    "repair it with `qos-sidecar config set KEY VALUE` for each key named, "
    "or `qos-sidecar config import FILE`"
)


class ConfigInvalid(ValueError):
    """What Redis holds does not validate; the last good configuration stays in force.
    `fallback`: what to serve when there is none yet (the last document written through
    the store, or the defaults, with the tenants and mode Redis holds)."""

    def __init__(self, message: str, fallback: Snapshot | None = None) -> None:
        super().__init__(message)
        self.fallback = fallback


class StorePartlyLost(Exception):
    """Parts of the store are lost or changed behind its version (a key deleted by hand,
    evicted): a change written now would carry the loss into a new version, where no
    record of the old one tells it any more. The sidecars put the parts back first."""


# Tells whether the store is whole: what it holds is what was recorded for its version.
Whole = Callable[[], Awaitable[bool]]


class ConfigStore:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    async def whole(self) -> bool:
        """Whether the store holds what was recorded for its version."""
        from sidecar.config import recovery  # which reads the store's keys from here

        return await recovery.whole(self._redis)

    @property
    def client(self) -> redis.Redis:
        """The Redis it reads, for what lives beside the configuration (fair shares)."""
        return self._redis

    async def version(self) -> int:
        return int(await self._redis.get(VERSION_KEY) or 0)

    async def load(self) -> Snapshot:
        async with self._redis.pipeline(transaction=True) as pipe:
            for key in (VERSION_KEY, DOC_KEY):
                pipe.get(key)
            pipe.hgetall(TENANTS_KEY)
            for key in (MODE_KEY, SHARES_KEY, GOOD_DOC_KEY, STORE_KEY):
                pipe.get(key)
            pipe.hgetall(API_KEYS_KEY)
            pipe.get(DECLARED_CONFIG_KEY)
            pipe.hgetall(DECLARED_TENANTS_KEY)
            pipe.lrange(AUDIT_KEY, 0, AUDIT_KEPT - 1)
            pipe.lrange(ADJUSTMENTS_KEY, 0, ADJUSTMENTS_KEPT - 1)
            results = await pipe.execute()
        version, doc, tenants, mode, shares, good, store_id, keys, config_file, owners = results[
            :10
        ]
        audit, moves = results[10:]
        digest = checksum.of((doc, mode, shares, config_file), (tenants, keys, owners))
        try:
            parsed = {
                _text(name): Tenant.model_validate_json(value) for name, value in tenants.items()
            }
            operator_mode = OperatorMode.model_validate_json(mode) if mode else OperatorMode()
            moved = _pool_shares(json.loads(shares)) if shares else None
        except (ValueError, KeyError) as error:
            raise ConfigInvalid(f"the tenants or mode in Redis are invalid: {error}") from error

        def snapshot(version: int, config: QosConfig, moved: Any) -> Snapshot:
            return Snapshot(
                version,
                config,
                parsed,
                operator_mode,
                moved,
                store_id=_text(store_id or b""),
                api_keys={_text(d): _text(t) for d, t in keys.items()},
                declared_config=_text(config_file) if config_file else None,
                declared_tenants={_text(name): _text(path) for name, path in owners.items()},
                audit=tuple(_text(entry) for entry in audit),
                moves=tuple(_text(move) for move in moves),
                digest=digest,
            )

        try:
            config = QosConfig.model_validate_json(doc) if doc else QosConfig()
        except ValueError as error:
            raise ConfigInvalid(
                f"the configuration document in Redis does not validate:\n{_problems(error)}",
                snapshot(0, _last_good(good), None),
            ) from error
        return snapshot(int(version or 0), config, moved)

    async def declared_by(self, tenant: str | None = None) -> str | None:
        """The file that declares the document (or `tenant`), if a file does."""
        if tenant is None:
            found = await self._redis.get(DECLARED_CONFIG_KEY)
        else:
            found = await self._redis.hget(DECLARED_TENANTS_KEY, tenant)
        return _text(found) if found else None

    async def stored_document(self) -> dict[str, Any]:
        """The document as Redis holds it, valid or not ({} when it is not a JSON object),
        for a change that repairs it."""
        raw = await self._redis.get(DOC_KEY)
        try:
            document = json.loads(raw) if raw else {}
        except ValueError:
            return {}
        return document if isinstance(document, dict) else {}

    async def initialize(self) -> str:
        """The store's identity; an empty store (none) is made a new one, with the
        default document where it holds none."""
        identity, version = await self._redis.eval(
            OPEN_STORE, 3, STORE_KEY, DOC_KEY, VERSION_KEY, new_identity(), _DEFAULTS
        )
        if int(version):
            await self._redis.publish(CHANGED_CHANNEL, str(int(version)))
        return _text(identity)

    async def save_config(
        self,
        config: QosConfig,
        held: str | None = None,
        declared_by: str | None = None,
        *,
        actor: Actor = PROGRAM,
        whole: Whole | None = None,
    ) -> int:
        """A new document; the controller starts again from its shares. `held`, here
        and in every change: the identity of the store the writer read (StoreLost when
        Redis no longer holds it); None: whatever store Redis holds, made new if empty.
        `actor`, in every change: who makes it, for the record (config/audit.py).
        `whole`, for a sidecar's own writes: only into a store found whole."""

        document = config.model_dump_json()
        what = f"configuration from {declared_by}" if declared_by else "configuration set"

        def change(olds: list[Any]) -> Write:
            def write(pipe: Any) -> None:
                pipe.set(DOC_KEY, document)
                pipe.set(GOOD_DOC_KEY, document)
                pipe.delete(SHARES_KEY)
                if declared_by is not None:  # a file's, which the commands leave to the file
                    pipe.set(DECLARED_CONFIG_KEY, declared_by)
                else:
                    pipe.delete(DECLARED_CONFIG_KEY)

            before = _document_or_defaults(olds[0])
            changed = differences(before, json.loads(document))
            return write, actor.entry("config", what, changed)

        return await self._change(change, held, watch=(DOC_KEY,), whole=whole)

    async def save_shares(
        self,
        shares: dict[Tier, float],
        reason: str,
        pool: str = DEFAULT_POOL,
        held: str | None = None,
        before: dict[Tier, float] | None = None,
        whole: Whole | None = None,
    ) -> int:
        """The SLO controller's new shares for one pool, and a line of history saying why
        (with the shares `before` it, when given). Stored as {pool: {tier: share}}; the
        other pools' shares are kept. With `whole`, written only into a store it finds
        whole (StorePartlyLost otherwise)."""
        document = _rounded(shares)
        line: dict[str, Any] = {"at": time.time(), "reason": reason, "shares": document}
        line |= {"pool": pool} | ({"before": _rounded(before)} if before else {})
        entry = json.dumps(line)

        def change(olds: list[Any]) -> Write:
            every_pool = {
                name: {tier.value: value for tier, value in moved.items()}
                for name, moved in (_pool_shares(json.loads(olds[0])) if olds[0] else {}).items()
            }
            every_pool[pool] = document

            def write(pipe: Any) -> None:
                pipe.set(SHARES_KEY, json.dumps(every_pool))
                pipe.lpush(ADJUSTMENTS_KEY, entry)
                pipe.ltrim(ADJUSTMENTS_KEY, 0, ADJUSTMENTS_KEPT - 1)

            return write, None  # the controller's own record, above

        return await self._change(change, held, watch=(SHARES_KEY,), whole=whole)

    async def adjustments(self, count: int = 20) -> list[dict[str, Any]]:
        """The controller's latest adjustments, newest first."""
        return [json.loads(x) for x in await self._redis.lrange(ADJUSTMENTS_KEY, 0, count - 1)]

    async def save_mode(
        self,
        mode: OperatorMode,
        held: str | None = None,
        *,
        what: str | None = None,
        actor: Actor = PROGRAM,
    ) -> int:
        """The new mode, and the record of who switched it, in one transaction. `what`:
        the switch as the operator made it ("mode core-only", "shed p2")."""
        stored = mode.model_dump_json()

        def change(olds: list[Any]) -> Write:
            before = json.loads(olds[0]) if olds[0] else OperatorMode().model_dump(mode="json")
            changed = differences(before, json.loads(stored))
            entry = actor.entry("mode", what or f"mode {mode.mode.value}", changed)
            return (lambda pipe: pipe.set(MODE_KEY, stored)), entry

        return await self._change(change, held, watch=(MODE_KEY,))

    async def audit(self, count: int = 20, controller: bool = False) -> list[AuditEntry]:
        """The latest changes, newest first: the controller's moves among them only when
        asked (a busy controller would crowd the rest out)."""
        stored = await self._redis.lrange(AUDIT_KEY, 0, count - 1)
        found = [entry for text in stored if (entry := AuditEntry.from_json(text))]
        if controller:
            moves = await self._redis.lrange(ADJUSTMENTS_KEY, 0, count - 1)
            found += [entry for text in moves if (entry := controller_entry(json.loads(text)))]
            found.sort(key=lambda entry: entry.at, reverse=True)
        return found[:count]

    async def put_tenant(
        self,
        name: str,
        tenant: Tenant,
        api_key: str | None = None,
        *,
        move_key: bool = False,
        actor: Actor = PROGRAM,
    ) -> int:
        """Add or change a tenant, with a key for it (raises KeyHeld when another tenant
        holds the key, unless `move_key`, and TenantInvalid for a bad name or key)."""
        put = await self.put_tenant_reporting(name, tenant, api_key, move_key=move_key, actor=actor)
        return put.version

    async def put_tenant_reporting(
        self,
        name: str,
        tenant: Tenant,
        api_key: str | None = None,
        *,
        move_key: bool = False,
        held: str | None = None,
        actor: Actor = PROGRAM,
    ) -> tenants.Put:
        tenants.check_name(name)
        if api_key is not None:
            tenants.check_api_key(api_key)
        digest = hash_api_key(api_key) if api_key is not None else ""
        own = (TENANTS_KEY, API_KEYS_KEY, tenant_keys_key(name), VERSION_KEY, STORE_KEY)
        record = tenant.model_dump_json()
        store = held if held is not None else await self.initialize()
        while True:
            found = await self.tenant_hash(digest) if digest else None
            holder = _text(found) if found is not None else None
            holder_keys = tenant_keys_key(holder or name)
            before = await self._redis.hget(TENANTS_KEY, name)
            entry = tenants.put_entry(actor, name, before, record, digest, holder)
            done = await tenants.put(
                self._redis,
                tenants.Keys(own, AUDIT_KEY, AUDIT_KEPT),
                holder_keys,
                tenants.Attempt(name, record, digest, holder, move_key, store, before, entry),
            )
            if done is not None:
                await self._redis.publish(CHANGED_CHANNEL, str(done.version))
                return done

    async def remove_tenant(
        self, name: str, held: str | None = None, *, actor: Actor = PROGRAM
    ) -> bool:
        keys = (TENANTS_KEY, API_KEYS_KEY, tenant_keys_key(name), VERSION_KEY, STORE_KEY)
        store = held if held is not None else await self.initialize()
        while True:
            before = await self._redis.hget(TENANTS_KEY, name)
            entry = tenants.remove_entry(actor, name, before)
            done = await tenants.remove(
                self._redis, tenants.Keys(keys, AUDIT_KEY, AUDIT_KEPT), name, store, before, entry
            )
            if done is not None:
                break
        existed, version = done
        await self._redis.publish(CHANGED_CHANNEL, str(version))
        return existed

    async def tenant_hash(self, digest: str) -> bytes | str | None:
        return await self._redis.hget(API_KEYS_KEY, digest)

    async def key_count(self, tenant: str) -> int:
        """The keys that let requests in as `tenant`: those its set names and it holds."""
        digests = list(await self._redis.smembers(tenant_keys_key(tenant)))
        if not digests:
            return 0
        holders = await self._redis.hmget(API_KEYS_KEY, digests)
        return sum(1 for holder in holders if holder is not None and _text(holder) == tenant)

    async def tenant_for_key_hash(self, digest: str) -> str | None:
        name = await self._redis.hget(API_KEYS_KEY, digest)
        return None if name is None else _text(name)

    async def _change(
        self,
        plan: Callable[[list[Any]], Write],
        held: str | None,
        watch: tuple[str, ...],
        whole: Whole | None = None,
    ) -> int:
        """One change, in one transaction, in the store `held` names (or, with none held,
        in whatever store Redis holds): `plan` is given the `watch` keys' values and
        returns the commands to queue and the record of the change; the version bumps.
        With `whole`, only into a store found whole, every part it is checked by watched
        until the change is written (a part lost meanwhile: checked again)."""
        store = held if held is not None else await self.initialize()
        checked = (*CHECKED_STRINGS, *CHECKED_HASHES) if whole is not None else ()
        while True:
            try:
                async with self._redis.pipeline(transaction=True) as pipe:
                    await pipe.watch(STORE_KEY, *dict.fromkeys((*watch, *checked)))
                    found = await pipe.get(STORE_KEY)
                    if found is None or _text(found) != store:
                        raise StoreLost(f"Redis no longer holds the store {store}")
                    if whole is not None and not await whole():
                        raise StorePartlyLost(
                            "parts of the configuration in Redis are lost or changed behind "
                            "its version"
                        )
                    olds = [await pipe.get(key) for key in watch]
                    write, entry = plan(olds)
                    pipe.multi()
                    write(pipe)
                    if entry is not None:
                        pipe.lpush(AUDIT_KEY, entry.to_json())
                        pipe.ltrim(AUDIT_KEY, 0, AUDIT_KEPT - 1)
                    pipe.incr(VERSION_KEY)
                    results = await pipe.execute()
                break
            except redis.WatchError:
                continue  # changed meanwhile (a put back, another writer): look again
        version = int(results[-1])
        await self._redis.publish(CHANGED_CHANNEL, str(version))
        return version


# What a change queues in its transaction, and its record (None: one kept elsewhere).
Write = tuple[Callable[[Any], Any], AuditEntry | None]

_DEFAULTS = QosConfig().model_dump_json()


def _problems(error: ValueError) -> str:
    return describe(error) if isinstance(error, ValidationError) else str(error)


def _document_or_defaults(stored: bytes | None) -> Any:
    """A stored document as JSON for a record of what changed: the defaults where there
    is none (a store's first document), {} where it is not JSON."""
    if stored is None:
        return json.loads(_DEFAULTS)
    try:
        return json.loads(stored)
    except ValueError:
        return {}


def _rounded(shares: dict[Tier, float]) -> dict[str, float]:
    return {tier.value: round(share, 6) for tier, share in shares.items()}


def _last_good(document: bytes | None) -> QosConfig:
    """The last document the store wrote, or the defaults."""
    try:
        return QosConfig.model_validate_json(document) if document else QosConfig()
    except ValueError:
        return QosConfig()


def _pool_shares(document: dict[str, Any]) -> dict[str, dict[Tier, float]]:
    """{pool: {tier: share}}; a document from before pools ({tier: share}) is the
    default pool's."""
    if document and all(key in Tier._value2member_map_ for key in document):
        document = {DEFAULT_POOL: document}
    return {
        pool: {Tier(tier): float(value) for tier, value in moved.items()}
        for pool, moved in document.items()
    }


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
