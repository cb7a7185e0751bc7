"""The first pool a request may overflow to, offered in the same budget call as its own
pool's: when its own tier's bucket would shed it (it refuses for longer than the request
may wait), the script takes from the other pool's budgets instead, atomically, in the one
Redis call a decision makes (limiter Alternative). Offered only when the own bucket was
short at its last answer: a request its own pool admits costs nothing more. Whatever the
one call could not settle (a limiter that cannot take an alternative, a pool further
down the list) the decider asks after, as for a request shed for load."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sidecar.budget_layout import AdmittedLoad
from sidecar.config.base import Tier
from sidecar.loops.overload.admitted import ProjectedAdmission
from sidecar.loops.overload.shedding import SheddingState, overload_refusal
from sidecar.refusals import Reason, Refusal
from sidecar.request.admission.budgets import budget_buckets
from sidecar.request.admission.overflow import elsewhere
from sidecar.request.admission.request import AdmissionRequest
from sidecar.request.limiter.buckets import Alternative, BucketSpec

Project = Callable[[AdmissionRequest], ProjectedAdmission | None]


@dataclass(eq=False)
class Offer:
    request: AdmissionRequest  # as the other pool takes it
    buckets: list[BucketSpec]  # the other pool's
    projected: ProjectedAdmission | None  # counted in the other pool's load meanwhile

    def alternative(self, beyond: float) -> Alternative:
        load: AdmittedLoad | None = self.projected.load if self.projected else None
        return Alternative(self.request.charge.reserved, self.buckets, load, beyond)

    def cancel(self) -> None:
        if self.projected is not None:
            self.projected.cancel()  # a no-op once confirmed


def offer(
    request: AdmissionRequest,
    shedding: SheddingState,
    levels: Mapping[tuple[str, Tier], float],
    project: Project,
) -> Offer | None:
    """The request's offer to the first pool its tier overflows to that takes it as far
    as can be told without Redis; None when there is none, or its own pool's bucket had
    room at its last answer."""
    if not request.tier_config.sheddable or not request.tier_config.overflow:
        return None
    level = levels.get((request.pool.name, request.tier))
    if level is not None and level >= request.charge.reserved:
        return None  # likely admitted at home
    for moved in elsewhere(request, Reason.SHED_TIER_BUDGET):
        there = shedding.for_pool(moved.pool.name)
        if overload_refusal(moved.tier, moved.snapshot, there) is not None:
            continue
        buckets = budget_buckets(
            moved.snapshot, moved.identity, moved.pool, there.capacity(moved.pool)
        )
        try:
            moved = moved.within(buckets)
        except Refusal:
            continue
        return Offer(moved, buckets, project(moved))
    return None
