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
from typing import Any

from sidecar.config.base import Tier
from sidecar.config.operator_state import OperatorMode, Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import Snapshot

log = logging.getLogger(__name__)

FORMAT = 1


class CopyRefused(ValueError):
    """A copy on disk that is not whole or does not validate: nothing of it is used."""


def state_of(snapshot: Snapshot) -> dict[str, Any]:
    """What a copy holds of `snapshot`, as JSON."""
    return {
        "version": snapshot.version,
        "store": snapshot.store_id,
        "config": json.loads(snapshot.config.model_dump_json()),
        "mode": json.loads(snapshot.mode.model_dump_json()),
        "shares": {
            pool: {tier.value: share for tier, share in moved.items()}
            for pool, moved in (snapshot.shares or {}).items()
        }
        or None,
        "tenants": {name: json.loads(t.model_dump_json()) for name, t in snapshot.tenants.items()},
        "api_keys": dict(snapshot.api_keys),
        "declared_config": snapshot.declared_config,
        "declared_tenants": dict(snapshot.declared_tenants),
        "audit": list(snapshot.audit),
        "moves": list(snapshot.moves),
        "digest": snapshot.digest,
    }


def snapshot_of(state: dict[str, Any]) -> Snapshot:
    """The snapshot a copy holds (ValueError, KeyError or TypeError when it does not
    validate)."""
    shares = state["shares"]
    return Snapshot(
        int(state["version"]),
        QosConfig.model_validate_json(json.dumps(state["config"])),
        {
            str(name): Tenant.model_validate_json(json.dumps(tenant))
            for name, tenant in state["tenants"].items()
        },
        OperatorMode.model_validate_json(json.dumps(state["mode"])),
        {
            str(pool): {Tier(tier): float(share) for tier, share in moved.items()}
            for pool, moved in shares.items()
        }
        if shares
        else None,
        store_id=str(state["store"]),
        api_keys={str(d): str(t) for d, t in state["api_keys"].items()},
        declared_config=state["declared_config"],
        declared_tenants={str(n): str(p) for n, p in state["declared_tenants"].items()},
        audit=tuple(str(entry) for entry in state["audit"]),
        moves=tuple(str(move) for move in state["moves"]),
        digest=str(state["digest"]),
    )


def _digest(state: dict[str, Any]) -> str:
    canonical = json.dumps(state, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def write(path: Path, snapshot: Snapshot, source: str) -> None:
    """`snapshot` as the copy at `path`, atomically; `source`: the Redis it came from
    (redacted), for whoever reads the file."""
    state = state_of(snapshot)
    document = {
        "format": FORMAT,
        "written": time.time(),
        "redis": source,
        "sha256": _digest(state),
        "state": state,
    }
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as file:
            json.dump(document, file)
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
    try:
        document = json.loads(raw)
        if document.get("format") != FORMAT:
            raise CopyRefused(f"{path}: format {document.get('format')!r}, not {FORMAT}")
        state = document["state"]
        if _digest(state) != document["sha256"]:
            raise CopyRefused(f"{path}: its content does not match its SHA-256")
        snapshot = snapshot_of(state)
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
