"""A request on its way through admission: what its client asked (`Asked`, the same for
every pool), and the request as one pool would take it (`Placement`: its body, price and
wait there), reserved once its budgets took it. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from sidecar.config.base import Tier
from sidecar.config.pools import Pool
from sidecar.config.schema import TierConfig
from sidecar.config.store import Snapshot
from sidecar.evolve import evolved
from sidecar.request.admission.identity import Identity
from sidecar.request.bodies.parsed import ParsedRequest, TextForm
from sidecar.request.limiter.buckets import BucketSpec
from sidecar.request.limiter.verdicts import too_big
from sidecar.request.policy.cost import Charge, Reservation
from sidecar.request.policy.decision import FirstTokenForecast, RequestView

_BURST = attrgetter("burst")


@dataclass(frozen=True)
class Asked:
    view: RequestView
    snapshot: Snapshot  # the configuration it is decided by
    identity: Identity
    parsed: ParsedRequest
    substitute: bool  # its client takes an answer from another pool's model


@dataclass(frozen=True)
class Placement:
    asked: Asked
    pool: Pool  # the pool serving it here
    settings: TierConfig  # its tier's in that pool
    body: dict[str, Any] | None  # the body to forward instead, when it changed
    charge: Charge  # what it costs this pool's budgets
    max_wait: float  # seconds it may wait for admission here
    overflowed_from: str = ""  # the pool that would not take it, when it is another's
    reservation: Reservation | None = None  # what it took, when its end settles it
    first_token: FirstTokenForecast | None = None  # a stream's, in its own pool

    @property
    def tier(self) -> Tier:
        return self.asked.identity.tier

    def within(self, buckets: list[BucketSpec]) -> Placement:
        """Reserving no more than its smallest bucket holds (the rest of its cost is owed
        when its answer is settled); refused when its prompt alone is more."""
        smallest = min(buckets, key=_BURST)
        charge = evolved(self.charge, ceiling=smallest.burst)
        if charge.prompt_cost > smallest.burst:
            identity = self.asked.identity
            raise too_big(identity.tier.value, identity.tenant_label, charge.prompt_cost, smallest)
        return evolved(self, charge=charge)

    def reserved(self, buckets: list[BucketSpec]) -> Placement:
        """With what it takes from `buckets`, when its end settles it: when its tier
        charges output, or when part of its prompt was a configured estimate (media, a
        stored conversation) that the answer's usage corrects. Otherwise it is charged
        its prompt only: nothing to settle."""
        parsed = self.asked.parsed
        if self.charge.output_weight <= 0 and not parsed.prompt.estimated_from_outside:
            return self
        reservation = Reservation(
            self.charge,
            tuple(buckets),
            parsed.shape.text is TextForm.CHAT,
            parsed.model or "",
            self.pool.name,
            self.tier,
            sized=parsed.shape.text in (TextForm.CHAT, TextForm.COMPLETION),
        )
        return evolved(self, reservation=reservation)
