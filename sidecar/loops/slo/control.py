"""The control law that moves budget between tiers from P0's SLO compliance. Pure.

The brief's law: when P0's compliance is comfortably above its target (≥ give_above,
99.8 %), move give_step (5 %) of P0's share to P1 and P2; when it falls below
take_below (95 %), take take_step (10 %) of P1's and P2's shares back to P0. In between
— the dead band — nothing moves, and after any move nothing moves for cooldown_seconds.
Shares stay within each tier's floor and ceiling (P1's floor is its minimum guarantee)
and keep their sum, so the fleet is neither over- nor under-committed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.config.base import Tier
from sidecar.config.slo_config import ControllerConfig

Shares = dict[Tier, float]


@dataclass(frozen=True)
class Compliance:
    ratio: float | None  # None: too few fresh samples to judge
    samples: int


@dataclass(frozen=True)
class Adjustment:
    shares: Shares
    reason: str


def adjust(
    shares: Shares,
    p0: Compliance,
    config: ControllerConfig,
    now: float,
    last_adjusted_at: float | None,
) -> Adjustment | None:
    """The next shares, or None to leave them."""
    if last_adjusted_at is not None and now - last_adjusted_at < config.cooldown_seconds:
        return None
    if p0.ratio is None:
        return None
    if p0.ratio < config.take_below:
        moved = _take_from_p1_p2(shares, config)
        reason = (
            f"P0 compliance {p0.ratio:.2%} < {config.take_below:.1%}: "
            f"{config.take_step:.0%} of P1/P2 back to P0"
        )
    elif p0.ratio >= config.give_above:
        moved = _give_from_p0(shares, config)
        reason = (
            f"P0 compliance {p0.ratio:.2%} >= {config.give_above:.1%}: "
            f"{config.give_step:.0%} of P0 to P1/P2"
        )
    else:
        return None
    if all(abs(moved[t] - shares[t]) < 1e-9 for t in Tier):
        return None  # pinned at the bounds: nothing left to move
    return Adjustment(moved, reason)


def _take_from_p1_p2(shares: Shares, config: ControllerConfig) -> Shares:
    room = config.ceilings[Tier.P0] - shares[Tier.P0]
    wanted = {
        t: min(shares[t] * config.take_step, shares[t] - config.floors[t])
        for t in (Tier.P1, Tier.P2)
    }
    wanted = {t: max(0.0, w) for t, w in wanted.items()}
    total = sum(wanted.values())
    if total > room:  # P0 cannot take it all: take less from each, in proportion
        wanted = {t: w * room / total for t, w in wanted.items()} if total else wanted
        total = room
    moved = dict(shares)
    for tier, amount in wanted.items():
        moved[tier] -= amount
    moved[Tier.P0] += total
    return moved


def _give_from_p0(shares: Shares, config: ControllerConfig) -> Shares:
    give = max(
        0.0, min(shares[Tier.P0] * config.give_step, shares[Tier.P0] - config.floors[Tier.P0])
    )
    moved = dict(shares)
    given = 0.0
    # Half each to P1 and P2, each up to its ceiling; what one cannot take, the other may.
    for tier in (Tier.P1, Tier.P2):
        portion = min(give / 2, config.ceilings[tier] - moved[tier])
        moved[tier] += max(0.0, portion)
        given += max(0.0, portion)
    for tier in (Tier.P1, Tier.P2):
        rest = min(give - given, config.ceilings[tier] - moved[tier])
        if rest > 0:
            moved[tier] += rest
            given += rest
    moved[Tier.P0] -= given
    return moved
