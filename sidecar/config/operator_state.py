"""What operators keep in Redis beside the configuration: tenants, and the mode."""

from __future__ import annotations

import enum

from pydantic import Field

from sidecar.config.base import PoolName, Positive, Strict, Tier


class Tenant(Strict):
    tier: Tier
    # An optional budget of the tenant's own, inside its tier's: tokens a second, shared
    # by every pool the tenant uses...
    rate_tokens_per_second: Positive | None = None
    # ...except the pools named here, where the tenant has a budget of its own instead.
    pool_rates: dict[PoolName, Positive] = Field(default_factory=dict)
    burst_seconds: Positive = 0.5
    # Its weight in its tier's fair shares: under contention it is entitled to
    # weight / (the active tenants' weights) of the tier's rate.
    weight: Positive = 1.0

    def rate_in(self, pool: str) -> tuple[float | None, str | None]:
        """The tenant's rate in `pool` and the pool its bucket is kept for (None: the
        bucket shared across pools); (None, None) when it has no rate there."""
        if pool in self.pool_rates:
            return self.pool_rates[pool], pool
        return self.rate_tokens_per_second, None


class Mode(enum.StrEnum):
    NORMAL = "normal"
    CORE_ONLY = "core-only"  # the brief's "protect transactions only": P0 alone admitted
    SHADOW = "shadow"  # every decision computed and counted, nothing refused


class OperatorMode(Strict):
    mode: Mode = Mode.NORMAL
    # Tiers an operator sheds outright, whatever the load.
    force_shed: frozenset[Tier] = frozenset()
