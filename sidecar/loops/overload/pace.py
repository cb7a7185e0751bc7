"""How fast a pool's requests in flight end and start, by tier: what a shed tier's comeback
is foreseen from. Pure: the figures are measured by the admission queue over its own slots.

Each tier's slots are taken as ending at random, each held for the tier's mean lately
(exponential), and the tiers still admitted as starting more at their pace lately, each
held as long (a queue with a server per request, from where it stands now). So the
requests held by tier t at time s from now are

    N_t(s) = A_t D_t + (N_t - A_t D_t) exp(-s / D_t)

(N_t held now, D_t their mean hold, A_t taken a second: 0 for the tiers shed), and the
comeback is the first s at which their sum has come down to what must remain. A burst of
short requests above the shed tier ends in about their own time; the long ones below it
hold their slots for longer: the tiers are told apart because their holds are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sidecar.config.base import Tier

# No comeback is foreseen later than this (the longest Retry-After a tier may set).
LONGEST_SECONDS = 3600.0
# How closely the comeback is searched for: a hundredth of itself is plenty.
_PRECISION = 0.01


@dataclass(frozen=True)
class Pace:
    """This sidecar's slots in a pool, by tier: held now, the seconds each was held on
    average lately (None: none given back lately), and taken a second lately."""

    held: Mapping[Tier, int]
    holds: Mapping[Tier, float | None]
    taken: Mapping[Tier, float]

    def seconds(self, share: float, still_admitted: Iterable[Tier]) -> float | None:
        """Until `share` of the requests in flight has ended, net of what the tiers
        `still_admitted` start meanwhile; None while they keep as many in flight as must
        remain, or with no hold known."""
        admitted = set(still_admitted)
        total = sum(self.held.values())
        remain = (1.0 - share) * total
        known = [hold for hold in self.holds.values() if hold]
        if total <= 0 or not known:
            return None
        usual = sum(known) / len(known)  # for a tier none of whose slots ended lately
        terms = []
        for tier in set(self.held) | admitted:
            hold = self.holds.get(tier) or usual
            steady = self.taken.get(tier, 0.0) * hold if tier in admitted else 0.0
            terms.append((steady, self.held.get(tier, 0) - steady, hold))

        def in_flight(after: float) -> float:
            return sum(steady + excess * math.exp(-after / hold) for steady, excess, hold in terms)

        if in_flight(0.0) <= remain:
            return 0.0
        if in_flight(LONGEST_SECONDS) > remain:
            return None
        early, late = 0.0, LONGEST_SECONDS
        while late - early > _PRECISION * late:
            middle = (early + late) / 2
            early, late = (early, middle) if in_flight(middle) <= remain else (middle, late)
        return late
