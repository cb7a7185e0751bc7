"""What each active tenant of a tier was served and refused, read from the fair-share
state the token-bucket script keeps in Redis, and how fair that was."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from sidecar.budget_layout import fair_share_keys
from sidecar.config.schema import FairnessConfig
from sidecar.loops.fairness.shares import jain_index, max_min_shares

# Refused tokens, as a part of those served, that say a tenant wanted more (rounding and
# the decay of an old refusal aside).
REFUSED_AT_ALL = 0.01


@dataclass(frozen=True)
class TenantUsage:
    tenant: str
    weight: float
    served: float  # tokens a second, over the fairness window
    refused: float  # tokens a second the tier's bucket refused it (held or shed)
    # Its weighted max-min share of the tier's rate: what it was served, if it wanted no
    # more (nothing refused), else its part of what those tenants leave.
    entitled: float


@dataclass(frozen=True)
class TierFairness:
    tier: str
    pool: str
    rate: float  # the tier's tokens a second
    tenants: tuple[TenantUsage, ...]  # the active ones, most served first

    @property
    def index(self) -> float | None:
        """Jain's index over served / entitled: 1 when every tenant got its share."""
        return jain_index(t.served / t.entitled for t in self.tenants if t.entitled > 0)

    def top(self, count: int) -> tuple[TenantUsage, ...]:
        return self.tenants[:count]


def tier_fairness(
    state: Mapping[Any, Any], now_ms: float, config: FairnessConfig, tier: str, pool: str,
    rate: float,
) -> TierFairness:  # fmt: skip
    """The tier's active tenants from its state hash (fields "t:<tenant>" holding
    "served,refused,at ms,weight", decayed over the window since `at`)."""
    window_ms, active_ms = config.window_seconds * 1000, config.active_seconds * 1000
    found: dict[str, tuple[float, float, float]] = {}
    for field, value in state.items():
        name = field.decode()
        if not name.startswith("t:"):
            continue
        served, refused, at, weight = (float(part) for part in value.decode().split(","))
        if now_ms - at > active_ms:
            continue  # gone quiet; the script drops it on a later call
        decay = math.exp(-max(0.0, now_ms - at) / window_ms)
        per_second = decay / config.window_seconds
        found[name[2:]] = (served * per_second, refused * per_second, weight)
    entitled = max_min_shares(
        {t: _demand(served, refused) for t, (served, refused, _) in found.items()},
        {t: weight for t, (_, _, weight) in found.items()},
        rate,
    )
    tenants = sorted(
        (TenantUsage(t, w, s, a, entitled[t]) for t, (s, a, w) in found.items()),
        key=lambda usage: (-usage.served, usage.tenant),
    )
    return TierFairness(tier, pool, rate, tuple(tenants))


def _demand(served: float, refused: float) -> float:
    """What a tenant wants: what it got, unless the tier refused it some of what it asked
    (a refusal's count, not its size, is the signal: the over-limit cache answers many
    refusals without Redis, so what reaches the script undercounts what was asked)."""
    return math.inf if refused > REFUSED_AT_ALL * max(served, 1.0) else served


async def redis_now_ms(client: redis.Redis) -> float:
    """Redis's clock, the one the script stamps the tenants' entries with."""
    seconds, micros = await client.time()
    return seconds * 1000 + micros / 1000


async def read_tier_fairness(
    client: redis.Redis,
    config: FairnessConfig,
    tier: str,
    pool: str,
    rate: float,
    now_ms: float | None = None,
) -> TierFairness:
    """The tier's fairness now (`now_ms`: Redis's clock, read once for several tiers)."""
    state = await client.hgetall(fair_share_keys(tier, pool)[0])
    now_ms = await redis_now_ms(client) if now_ms is None else now_ms
    return tier_fairness(state, now_ms, config, tier, pool, rate)
