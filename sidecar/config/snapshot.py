"""The configuration in force, as a sidecar holds it: one immutable snapshot a version
(the document, tenants, mode, the controller's shares, the API keys' hashes), with what
is worked out once from it (pools, the route table). The hot path reads it and nothing
else of the store; API keys are known by their SHA-256, never held raw."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from sidecar.config.base import Tier
from sidecar.config.operator_state import OperatorMode, Tenant
from sidecar.config.pools import Pool, Pools
from sidecar.config.pools import resolve as resolve_pools
from sidecar.config.schema import QosConfig
from sidecar.routes.table import RouteTable
from sidecar.routes.table import build as build_routes


def hash_api_key(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


@dataclass(frozen=True)
class Snapshot:
    version: int
    config: QosConfig = field(default_factory=QosConfig)
    tenants: dict[str, Tenant] = field(default_factory=dict)
    mode: OperatorMode = field(default_factory=OperatorMode)
    # The SLO controller's shares per pool, for the pools where it has moved any.
    shares: dict[str, dict[Tier, float]] | None = None
    store_id: str = ""  # the identity of the store it was read from ("": none yet)
    # The API keys' SHA-256 digests → their tenants, as the store held them.
    api_keys: dict[str, str] = field(default_factory=dict)
    # What files declare (config/files.py): the document's file, and each tenant's.
    declared_config: str | None = None
    declared_tenants: dict[str, str] = field(default_factory=dict)
    # The record of changes (config/audit.py) and the controller's moves, newest first,
    # as stored: put back with the rest, read when someone asks.
    audit: tuple[str, ...] = field(default=(), compare=False)
    moves: tuple[str, ...] = field(default=(), compare=False)
    # The checksum of what it was read from (checksum.py; "": not known).
    digest: str = field(default="", compare=False)
    pools: Pools = field(init=False, repr=False, compare=False)
    routes: RouteTable = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Once per version.
        object.__setattr__(self, "pools", resolve_pools(self.config))
        object.__setattr__(self, "routes", build_routes(self.config.routes))

    @property
    def default_pool(self) -> Pool:
        return self.pools.default

    def share(self, tier: Tier, pool: Pool | None = None) -> float:
        pool = pool or self.default_pool
        moved = (self.shares or {}).get(pool.name)
        return moved[tier] if moved else pool.tiers[tier].share

    def tier_rate(self, tier: Tier, pool: Pool | None = None) -> float:
        """The tier's bucket refill rate in tokens a second, as the controller has it, at
        the pool's configured capacity."""
        pool = pool or self.default_pool
        return self.share(tier, pool) * pool.capacity_tokens_per_second
