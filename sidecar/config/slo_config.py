"""The configuration's SLO targets and the controller that moves budget to meet them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field, model_validator

from sidecar.config.base import Positive, Share, Strict, Tier

if TYPE_CHECKING:
    from sidecar.config.schema import TiersConfig


class TierSlo(Strict):
    # A streamed answer meets its SLO when its first token comes within ttft_ms; a whole
    # answer when it is complete within latency_ms.
    ttft_ms: Positive
    # A whole answer meets its SLO within this long.
    latency_ms: Positive
    # The share of requests that must meet it.
    compliance: Annotated[float, Field(gt=0, le=1)]


class TierSlos(Strict):
    p0: TierSlo = TierSlo(ttft_ms=1000, latency_ms=10_000, compliance=0.99)
    p1: TierSlo = TierSlo(ttft_ms=3000, latency_ms=30_000, compliance=0.95)
    p2: TierSlo = TierSlo(ttft_ms=10_000, latency_ms=120_000, compliance=0.90)

    if TYPE_CHECKING:

        def __getitem__(self, tier: Tier) -> TierSlo: ...

    else:
        __getitem__ = object.__getattribute__  # in C, as TiersConfig's (schema.py)


class SloConfig(Strict):
    targets: TierSlos = TierSlos()
    # Compliance is computed over the last `window` samples of a tier, cluster-wide,
    # leaving out those older than max_sample_age_seconds: stale samples never steer.
    window: Annotated[int, Field(ge=10, le=100_000)] = 1000
    # Older samples never steer.
    max_sample_age_seconds: Annotated[float, Field(gt=0)] = 60.0
    # Fewer fresh samples than this and the controller does not act on the tier.
    min_samples: Annotated[int, Field(ge=1)] = 50
    # Share of exchanges whose response Envoy sends the sidecar, to time the first token
    # of those that stream (each costs a round trip, and one per chunk of a watched
    # stream: bench/completion_signal.py)...
    ttft_sample_rate: Annotated[float, Field(ge=0, le=1)] = 0.25
    # ...and at most this many a second per sidecar: a busy gateway still gets plenty of
    # samples (min_samples in seconds) without paying for a quarter of its traffic.
    ttft_samples_per_second: Annotated[float, Field(gt=0)] = 20.0


class TierBounds(Strict):
    p0: Share = 0.40
    p1: Share = 0.35  # P1's minimum guarantee
    p2: Share = 0.01

    def __getitem__(self, tier: Tier) -> float:
        return getattr(self, tier.value)


class TierCeilings(TierBounds):
    p0: Share = 0.90
    p1: Share = 0.60
    p2: Share = 0.30


class ControllerConfig(Strict):
    # Whether the lease holder moves budget between tiers.
    enabled: bool = True
    # How often the controller looks.
    interval_seconds: Annotated[float, Field(gt=0, le=60)] = 1.0
    # No move sooner than this after a move.
    cooldown_seconds: Annotated[float, Field(ge=0)] = 5.0
    # P0 compliance at or above this is comfortably above target: give some rate away.
    give_above: Annotated[float, Field(gt=0, le=1)] = 0.998
    # The share of P0's rate given away in one move.
    give_step: Annotated[float, Field(gt=0, le=0.5)] = 0.05
    # Below this P0 is in trouble: take rate back from P1 and P2.
    take_below: Annotated[float, Field(gt=0, le=1)] = 0.95
    # The share of P1's and P2's rates taken back in one move.
    take_step: Annotated[float, Field(gt=0, le=0.5)] = 0.10
    floors: TierBounds = TierBounds()
    ceilings: TierCeilings = TierCeilings()
    # One controller at a time: the holder of a Redis lease this long, renewed each tick.
    lease_seconds: Annotated[float, Field(gt=0, le=60)] = 3.0

    @model_validator(mode="after")
    def _sane(self) -> ControllerConfig:
        if self.lease_seconds < 3 * self.interval_seconds:
            raise ValueError("controller.lease_seconds must be at least 3 interval_seconds")
        if self.take_below >= self.give_above:
            raise ValueError("controller.take_below must be below controller.give_above")
        for tier in Tier:
            if self.floors[tier] > self.ceilings[tier]:
                raise ValueError(f"controller.floors.{tier.value} is above its ceiling")
        return self


def shares_within_bounds(tiers: TiersConfig, controller: ControllerConfig, where: str) -> None:
    """Each tier's share lies within the controller's floor and ceiling for it."""
    for tier in Tier:
        share = tiers[tier].share
        floor, ceiling = controller.floors[tier], controller.ceilings[tier]
        if not floor <= share <= ceiling:
            raise ValueError(
                f"{where}.{tier.value}.share {share:g} is outside the controller's bounds "
                f"[{floor:g}, {ceiling:g}] (controller.floors / controller.ceilings)"
            )
