"""The last known good configuration on the sidecar's own disk: what it holds of the
store (the document, the mode, the SLO controller's shares, the tenants and their API
keys' digests, which of them files declare, the record of changes, the version, the
store's identity and its checksum), written whole on every change, so that a sidecar
started while Redis is away, or that finds Redis empty or behind, serves and puts back
what operators set, never defaults.

A copy is written to a file of its own and renamed over the last (fsync'd before and
after), so a crash leaves the old copy or the new one, never half of either; it carries
a SHA-256 of its content, and a copy that does not match it, or does not read or
validate, is refused whole at start (logged; the sidecar holds what is safe instead)
rather than believed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from pathlib import Path

from sidecar.config.base import Strict, Tier
from sidecar.config.operator_state import OperatorMode, Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot

log = logging.getLogger(__name__)

FORMAT = 2


class CopyRefused(ValueError):
    """A copy on disk that is not whole or does not validate: nothing of it is used."""


class CopyState(Strict):
    """What a copy holds of a snapshot (validated and written by pydantic's core: a store
    of thousands of tenants is a few milliseconds either way)."""

    version: int
    store: str
    config: QosConfig
    mode: OperatorMode
    shares: dict[str, dict[Tier, float]] | None
    tenants: dict[str, Tenant]
    api_keys: dict[str, str]
    declared_config: str | None
    declared_tenants: dict[str, str]
    audit: tuple[str, ...]
    moves: tuple[str, ...]
    digest: str

    @classmethod
    def of(cls, snapshot: Snapshot) -> CopyState:
        return cls.model_construct(
            version=snapshot.version,
            store=snapshot.store_id,
            config=snapshot.config,
            mode=snapshot.mode,
            shares=snapshot.shares,
            tenants=snapshot.tenants,
            api_keys=snapshot.api_keys,
            declared_config=snapshot.declared_config,
            declared_tenants=snapshot.declared_tenants,
            audit=snapshot.audit,
            moves=snapshot.moves,
            digest=snapshot.digest,
        )

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self.version,
            self.config,
            dict(self.tenants),
            self.mode,
            {pool: dict(moved) for pool, moved in self.shares.items()} if self.shares else None,
            store_id=self.store,
            api_keys=dict(self.api_keys),
            declared_config=self.declared_config,
            declared_tenants=dict(self.declared_tenants),
            audit=self.audit,
            moves=self.moves,
            digest=self.digest,
        )


def write(path: Path, snapshot: Snapshot, source: str) -> None:
    """`snapshot` as the copy at `path`, atomically; `source`: the Redis it came from
    (redacted), for whoever reads the file. A line of facts about the copy (its format,
    when and whence it was written, the SHA-256 of the rest), then the state as JSON."""
    body = CopyState.of(snapshot).model_dump_json().encode()
    header = {
        "format": FORMAT,
        "written": time.time(),
        "redis": source,
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(json.dumps(header).encode() + b"\n" + body)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def read(path: Path) -> Snapshot | None:
    """The copy at `path`; None when there is none (CopyRefused when it is not whole or
    does not validate)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CopyRefused(f"{path}: {error.strerror or error}") from None
    first, _, body = raw.partition(b"\n")
    try:
        header = json.loads(first)
        if header.get("format") != FORMAT:
            raise CopyRefused(f"{path}: format {header.get('format')!r}, not {FORMAT}")
        if hashlib.sha256(body).hexdigest() != header["sha256"]:
            raise CopyRefused(f"{path}: its content does not match its SHA-256")
        snapshot = CopyState.model_validate_json(body).snapshot()
    except CopyRefused:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CopyRefused(f"{path}: not a whole copy ({error})") from None
    if snapshot.version <= 0 or not snapshot.store_id:
        raise CopyRefused(f"{path}: holds no version of a store")
    return snapshot


def _sync_directory(directory: Path) -> None:
    """The rename itself on disk (a power loss after it keeps the new copy)."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
