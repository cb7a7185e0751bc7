"""Token buckets: what a limiter is asked, what it answers, and how buckets are named."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sidecar.budget_layout import AdmittedLoad


@dataclass(frozen=True)
class FairShare:
    """Who asks a tier's bucket, for the tier's fair shares between its tenants: while
    the bucket is below `reserve` tokens, a tenant served more than its share of the
    tier's rate over the last `window_seconds` may not take it lower (docs/fair-shares.md)."""

    state_key: str  # hash: per tenant what it was served and refused, decayed
    active_key: str  # sorted set: tenant by when it last asked (Redis ms)
    tenant: str
    weight: float
    window_seconds: float
    active_seconds: float
    reserve: float  # tokens


class Owner(enum.Enum):
    """Whose budget a bucket is: what a refusal by it tells the client and the operator."""

    TIER = "tier"  # the tier's in a pool, shared by its tenants
    TENANT = "tenant"  # one tenant's own
    SAMPLES = "samples"  # the sidecar's own: how many responses it times


@dataclass(frozen=True)
class BucketSpec:
    key: str
    rate: float  # tokens a second
    burst: float  # tokens
    fair: FairShare | None = None  # a tier's bucket shared fairly by its tenants
    # How deep a settlement may take it below zero, in tokens (None: one burst). A
    # request reserves at most a burst; what its answer cost beyond is owed here.
    debt: float | None = None
    owner: Owner = Owner.TIER
    max_debt: float = field(init=False)  # the depth in force: the debt, one burst at least

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.burst <= 0:
            raise ValueError(f"bucket {self.key}: rate and burst must be positive")
        max_debt = self.burst if self.debt is None else max(self.burst, self.debt)
        object.__setattr__(self, "max_debt", max_debt)


class LaterRecord:
    """When admissions charged behind them (limiter/headroom.py) are recorded with the
    shared buckets: Redis's time (µs), once their charge is made (0: it recorded nothing);
    None until then."""

    def __init__(self) -> None:
        self.recorded_us: int | None = None
        self._waiting: list[Callable[[int], None]] = []

    def then(self, callback: Callable[[int], None]) -> None:
        """`callback(recorded_us)` once the charge is made (at once when it is)."""
        if self.recorded_us is not None:
            callback(self.recorded_us)
        else:
            self._waiting.append(callback)

    def made(self, recorded_us: int) -> None:
        waiting, self._waiting = self._waiting, []
        self.recorded_us = recorded_us
        for callback in waiting:
            callback(recorded_us)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    refused: BucketSpec | None = None  # the bucket that refused it (the longest wait)
    retry_after: float | None = None  # seconds; None when waiting can never help
    remaining: float = 0.0  # tokens left in the first bucket
    # Refused because the tenant is over its fair share of the contended tier: the rest
    # of the bucket is kept for the tier's other tenants (the refusal is this tenant's).
    over_fair_share: bool = False
    # When the admission's load was recorded with the shared buckets (Redis time, µs);
    # 0: not recorded.
    recorded_us: int = 0
    # Admitted without a call, charged behind: when its record is made.
    recorded_later: LaterRecord | None = None
    # With an alternative: True, taken from its buckets instead (the rest of the verdict
    # is theirs); False, refused by them too. None: not tried (the limiter could not, or
    # the first buckets' answer did not call for it).
    elsewhere: bool | None = None


@dataclass(frozen=True)
class Alternative:
    """Other buckets to take from in the same call, when the first set's first bucket
    (the tier's) refuses for longer than `beyond` seconds: another pool's budgets for a
    request its own pool's would shed. Same slot as the first set."""

    cost: float
    buckets: Sequence[BucketSpec]
    load: AdmittedLoad | None
    beyond: float  # seconds


class Limiter(Protocol):
    async def acquire(
        self,
        cost: float,
        buckets: Sequence[BucketSpec],
        load: AdmittedLoad | None = None,
        otherwise: Alternative | None = None,
    ) -> Verdict:
        """Take `cost` from every bucket, or from none; with `load`, record what the
        admission adds to its pool's load where every sidecar sees it (if it can); with
        `otherwise`, take from its buckets instead when the first refuse past its
        `beyond` (if it can: Verdict.elsewhere says)."""
        ...

    async def settle(self, delta: float, buckets: Sequence[BucketSpec]) -> float | None:
        """Give `delta` back to every bucket (negative: take it, into debt down to minus
        its max_debt): a finished request's real cost against what it reserved. Returns
        the first bucket's level after it (None when not known)."""
        ...


@dataclass(frozen=True)
class Charged:
    """What a charge sent behind its admissions found."""

    level: float  # the bucket's tokens after it
    recorded_us: int  # when it recorded the admissions (Redis time, µs; 0: not recorded)


class ChargingLimiter(Limiter, Protocol):
    async def charge(
        self, tokens: float, bucket: BucketSpec, load: AdmittedLoad | None, admissions: int
    ) -> Charged:
        """Take `tokens` from `bucket` whether it holds them or not (into debt down to
        its max_debt): `admissions` already admitted, with `load` their summed load to
        record (if it can); counted in the tenant's fair share as admitted."""
        ...
