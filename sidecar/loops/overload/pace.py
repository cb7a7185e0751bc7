"""How fast a pool's requests in flight end and start: what a shed tier's comeback is foreseen
from. Pure: the rates are measured by the admission queue over its own slots."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sidecar.config.base import Tier


@dataclass(frozen=True)
class Pace:
    """This sidecar's slots held in a pool, given back a second and taken a second by
    tier, lately. Its share of the pool's work is what it holds, so shares of the pool's
    load end at its pace (Little's law)."""

    held: int
    releases: float
    taken: Mapping[Tier, float]

    def seconds(self, share: float, still_admitted: Iterable[Tier]) -> float | None:
        """Until `share` of the work in flight has ended, net of what the tiers still
        admitted bring meanwhile at their pace; None while they bring as much as ends."""
        net = self.releases - sum(self.taken.get(tier, 0.0) for tier in still_admitted)
        return share * self.held / net if net > 0 else None
