"""Overload: whether a request's pool sheds its tier before any budget is asked for, by
the operator's mode (core-only, forced sheds) or the rules the load monitor keeps in
force (the KV and in-flight watermarks, no pod reporting: loops/overload/shedding.py).
Decided without Redis."""

from __future__ import annotations

from collections.abc import Callable

from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode
from sidecar.config.store import Snapshot
from sidecar.loops.overload.shedding import SheddingState
from sidecar.refusals import Reason, shed
from sidecar.request.admission.overflow import OVERFLOW_REASONS, Places
from sidecar.request.admission.request import Placement


class Overload:
    def __init__(self, shedding: Callable[[], SheddingState]) -> None:
        self._shedding = shedding  # the state the monitor keeps: read, never waited for

    def admissible(self, places: Places) -> Places:
        """The places that do not shed the request for load. Its own pool shedding it for
        one of OVERFLOW_REASONS leaves the others; for another reason (core-only, a
        forced shed) it is refused."""
        state = self._shedding()
        home = places.home
        elsewhere = tuple(place for place in places.elsewhere if not _sheds(place, state))
        reason = _sheds(home, state)
        if reason is None:
            return Places(home, elsewhere)
        refusal = shed(reason, home.tier.value)
        if reason not in OVERFLOW_REASONS or not elsewhere:
            raise refusal
        return Places(home, elsewhere, home_shed=refusal)


def _sheds(place: Placement, state: SheddingState) -> Reason | None:
    return overload_refusal(place.tier, place.asked.snapshot, state.for_pool(place.pool.name))


def overload_refusal(tier: Tier, snapshot: Snapshot, state: SheddingState) -> Reason | None:
    """Why `tier` is shed before any budget is asked for, or None to go on."""
    mode = snapshot.mode
    if mode.mode is Mode.CORE_ONLY and tier is not Tier.P0:
        return Reason.SHED_CORE_ONLY
    if tier in mode.force_shed:
        return Reason.SHED_FORCED
    return state.shedding[tier]
