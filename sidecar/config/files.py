"""Configuration as files, read: a document in `config export`'s schema (for a mounted
ConfigMap) and tenants with their API keys (for a mounted Secret). A file is taken whole
or not at all: one that does not validate is refused with its path and each key named.
Pure but for reading the file.

A file is read within bounds, before anything is built from it: at most MAX_BYTES, YAML
nested at most MAX_DEPTH deep, no aliases (one alias can stand for a billion nodes), at
most MAX_TENANTS tenants. A file that holds nothing (empty, or only comments: an editor's
rewrite caught half-way, a mount gone) is refused: one that means "no tenants" says
`tenants: {}`, one that means "every default" says `{}`.

The tenants file:

    tenants:
      checkout:
        tier: p0
        api_keys: [qsk-..., "sha256:9f86d081..."]   # a key, or its SHA-256 (hex)
        rate_tokens_per_second: 2000                 # any field of a tenant
    # Only in a change meant to revoke more tenants at once than the sidecars allow
    # (--tenants-file-max-revoked-share): the share this version of the file may revoke.
    max_revoked_share: 1.0
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, ValidationError, field_validator

from sidecar.config.base import Strict, describe
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import hash_api_key as _hash
from sidecar.config.tenants import KEY, KEY_RULE, NAME

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

MAX_BYTES = 32 * 1024 * 1024
MAX_DEPTH = 32
MAX_TENANTS = 100_000
# libyaml's parser where it is built in (pure Python's is ten times slower).
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

TenantName = Annotated[str, Field(pattern=f"^{NAME.pattern}$")]
# What an editor's schema says of a key (the validator below says it in words).
ApiKey = Annotated[str, Field(json_schema_extra={"pattern": f"^({DIGEST.pattern}|{KEY.pattern})$"})]


class FileRefused(ValueError):
    """A file that does not read or validate: nothing of it is applied."""


class DeclaredTenant(Tenant):
    # Its API keys: the keys themselves, or their SHA-256 digests as "sha256:<hex>".
    api_keys: tuple[ApiKey, ...] = ()

    @field_validator("api_keys")
    @classmethod
    def _keys(cls, keys: tuple[str, ...]) -> tuple[str, ...]:
        for key in keys:
            if not DIGEST.fullmatch(key) and not KEY.fullmatch(key):
                raise ValueError(f"an API key is {KEY_RULE}, or sha256:<64 hex digits>")
        return keys

    def digests(self) -> frozenset[str]:
        """Its keys as Redis knows them: their SHA-256 (a raw key is never stored)."""
        return frozenset(key[7:] if DIGEST.fullmatch(key) else _hash(key) for key in self.api_keys)

    def record(self) -> Tenant:
        return Tenant.model_validate(self.model_dump(exclude={"api_keys"}))


class TenantsFile(Strict):
    # A name not of the pattern is no tenant (the schema's patternProperties alone let
    # any other name through).
    tenants: dict[TenantName, DeclaredTenant] = Field(
        json_schema_extra={"additionalProperties": False}
    )
    max_revoked_share: float | None = Field(default=None, ge=0, le=1)


@dataclass(frozen=True)
class Declared:
    """A tenant as a file declares it, as the store keeps it: its record and its keys'
    SHA-256 digests."""

    record: Tenant
    digests: frozenset[str]


@dataclass(frozen=True)
class DeclaredTenants:
    """What a tenants file declares."""

    tenants: dict[str, Declared]
    max_revoked_share: float | None = None


@dataclass(frozen=True)
class Read:
    """A file as read: its content's fingerprint, and what it declares."""

    fingerprint: str
    declared: Any


def read_config(path: Path) -> Read:
    """The document a configuration file declares (keys it omits take their defaults)."""
    text, fingerprint = _text(path)
    document = _parsed(path, text, "every default says `{}`")
    try:
        return Read(fingerprint, QosConfig.from_partial(document))
    except ValidationError as error:
        raise FileRefused(f"{path} refused:\n{describe(error)}") from None
    except ValueError as error:
        raise FileRefused(f"{path} refused: {error}") from None


def read_tenants(path: Path) -> Read:
    """The tenants a tenants file declares (DeclaredTenants)."""
    text, fingerprint = _text(path)
    document = _parsed(path, text, "no tenants says `tenants: {}`")
    tenants = document.get("tenants") if isinstance(document, dict) else None
    if isinstance(tenants, dict) and len(tenants) > MAX_TENANTS:
        raise FileRefused(f"{path} refused: more than {MAX_TENANTS} tenants")
    try:
        file = TenantsFile.model_validate(document)
    except ValidationError as error:
        raise FileRefused(f"{path} refused:\n{describe(error)}") from None
    tenants = {name: Declared(t.record(), t.digests()) for name, t in file.tenants.items()}
    return Read(fingerprint, DeclaredTenants(tenants, file.max_revoked_share))


def declares_tenants(path: Path) -> bool:
    """Whether the file is a tenants file (it says `tenants:`), read within the bounds."""
    text, _ = _text(path)
    document = _parsed(path, text, "no tenants says `tenants: {}`, every default `{}`")
    return isinstance(document, dict) and "tenants" in document


def _text(path: Path) -> tuple[str, str]:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except OSError as error:
        raise FileRefused(f"{path} refused: {error.strerror or error}") from None
    if len(raw) > MAX_BYTES:
        raise FileRefused(f"{path} refused: larger than {MAX_BYTES // 1024 // 1024} MiB")
    try:
        return raw.decode(), hashlib.sha256(raw).hexdigest()
    except UnicodeDecodeError:
        raise FileRefused(f"{path} refused: not UTF-8") from None


def _parsed(path: Path, text: str, meant_empty: str) -> Any:
    try:
        _within_bounds(path, text)
        document = yaml.load(text, Loader=_Loader)  # JSON is YAML too
    except yaml.YAMLError as error:
        raise FileRefused(f"{path} refused: not YAML: {error}") from None
    if document is None:
        raise FileRefused(
            f"{path} refused: it holds nothing (empty, or only comments); a file that means "
            + meant_empty
        )
    return document


def _within_bounds(path: Path, text: str) -> None:
    """Walk the file's YAML events (no objects built) and refuse what would be too deep
    to build, or aliased."""
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise FileRefused(f"{path} refused: nested deeper than {MAX_DEPTH}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            raise FileRefused(f"{path} refused: YAML aliases (*name) are not taken here")
