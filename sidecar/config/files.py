"""Configuration as files, read: a document in `config export`'s schema (for a mounted
ConfigMap) and tenants with their API keys (for a mounted Secret). A file is taken whole
or not at all: one that does not validate is refused with its path and each key named.
Pure but for reading the file.

The tenants file:

    tenants:
      checkout:
        tier: p0
        api_keys: [qsk-..., "sha256:9f86d081..."]   # a key, or its SHA-256 (hex)
        rate_tokens_per_second: 2000                 # any field of a tenant
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
from sidecar.config.store import hash_api_key as _hash
from sidecar.config.tenants import KEY, KEY_RULE, NAME

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

TenantName = Annotated[str, Field(pattern=f"^{NAME.pattern}$")]


class FileRefused(ValueError):
    """A file that does not read or validate: nothing of it is applied."""


class DeclaredTenant(Tenant):
    # Its API keys: the keys themselves, or their SHA-256 digests as "sha256:<hex>".
    api_keys: tuple[str, ...] = ()

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
    tenants: dict[TenantName, DeclaredTenant] = Field(default_factory=dict)


@dataclass(frozen=True)
class Read:
    """A file as read: its content's fingerprint, and what it declares."""

    fingerprint: str
    declared: Any


def read_config(path: Path) -> Read:
    """The document a configuration file declares (keys it omits take their defaults)."""
    text, fingerprint = _text(path)
    document = _parsed(path, text)
    try:
        return Read(fingerprint, QosConfig.from_partial(document or {}))
    except ValidationError as error:
        raise FileRefused(f"{path} refused:\n{describe(error)}") from None
    except ValueError as error:
        raise FileRefused(f"{path} refused: {error}") from None


def read_tenants(path: Path) -> Read:
    """The tenants a tenants file declares, by name."""
    text, fingerprint = _text(path)
    document = _parsed(path, text)
    try:
        return Read(fingerprint, TenantsFile.model_validate(document or {}).tenants)
    except ValidationError as error:
        raise FileRefused(f"{path} refused:\n{describe(error)}") from None


def _text(path: Path) -> tuple[str, str]:
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise FileRefused(f"{path} refused: {error.strerror or error}") from None
    try:
        return raw.decode(), hashlib.sha256(raw).hexdigest()
    except UnicodeDecodeError:
        raise FileRefused(f"{path} refused: not UTF-8") from None


def _parsed(path: Path, text: str) -> Any:
    try:
        return yaml.safe_load(text)  # JSON is YAML too
    except yaml.YAMLError as error:
        raise FileRefused(f"{path} refused: not YAML: {error}") from None
