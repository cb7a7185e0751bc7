"""A request on its way through admission: what its client sent, read, with the state it
is decided by (`Request`, the same for every pool), and the request as one pool would
take it (`Placement`: its body, price and wait there). Plain values, made once: a stage
reads their fields, never recomputes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sidecar.config.base import Tier
from sidecar.config.pools import Pool
from sidecar.config.schema import TierConfig
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.shedding import SheddingState
from sidecar.request.admission.identity import Identity
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.request.policy.cost import Charge, Reservation
from sidecar.request.policy.decision import FirstTokenForecast, RequestView


@dataclass(frozen=True)
class Request:
    view: RequestView
    # The state it is decided by, each read once as its decision began.
    snapshot: Snapshot  # the configuration in force
    shedding: SheddingState  # the pools' load and the rules shedding for it
    identity: Identity
    parsed: ParsedRequest
    substitute: bool  # its client takes an answer from another pool's model


@dataclass(frozen=True)
class Placement:
    request: Request
    tier: Tier  # its identity's
    pool: Pool  # the pool serving it here
    settings: TierConfig  # its tier's in that pool
    body: dict[str, Any] | None  # the body to forward instead, when it changed
    charge: Charge  # what it costs this pool's budgets
    max_wait: float  # seconds it may wait for admission here
    overflowed_from: str = ""  # the pool that would not take it, when it is another's
    reservation: Reservation | None = None  # what it took, when its end settles it
    first_token: FirstTokenForecast | None = None  # a stream's, in its own pool
