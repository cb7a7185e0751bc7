"""What the sidecar decides for one request, and the pluggable piece that decides it.

A decider sees the request as Envoy presented it (headers, buffered body) and returns
Admit (send it upstream, perhaps with changed headers or body), Respond (answer it here;
nothing goes upstream) or Hold (the request waits in the admission queue; `resume` gives
the final Admit or Respond). The ext_proc state machine turns each into Envoy messages;
deciders never touch the protocol.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sidecar.refusals import Reason


class Admitted(enum.StrEnum):
    """Why a request was sent upstream (the `reason` label of qos_decisions_total)."""

    ADMITTED = "admitted"  # within its budgets, with a slot
    OVER_BUDGET = "admitted_over_budget"  # its tier is never shed for budget
    LIMITER_UNAVAILABLE = "limiter_unavailable"  # Redis is away: admit, not refuse all
    DECIDER_ERROR = "decider_error"  # deciding failed: fail open on the sidecar's own fault
    SHADOW = "shadow"  # shadow mode: it would have been refused, and was not


@dataclass(frozen=True)
class RequestView:
    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes | None  # None when the request had no body
    # Envoy was asked for this exchange's response: its first token may be timed.
    response_watched: bool = False


@dataclass(frozen=True)
class Admit:
    set_headers: Mapping[str, str] = field(default_factory=dict)
    remove_headers: tuple[str, ...] = ()
    replace_body: bytes | None = None
    reason: Admitted = Admitted.ADMITTED
    shadowed: Reason | None = None  # in shadow mode, why it would have been refused
    tier: str = ""
    pool: str = ""  # the model pool that serves it ("" when none was resolved)
    slot: str = ""  # the in-flight slot taken, to give back when the exchange ends
    queue_wait: float | None = None  # seconds waited for the slot
    foreseen_wait: float | None = None  # seconds its wait was foreseen to take, if it was
    time_first_byte: bool = False  # watch the response body for the first token's time
    reroute: bool = False  # the headers set choose the route: Envoy must choose it again
    route: str = ""  # the route's kind (sidecar/routes/kinds.py), when it was charged
    cost: float | None = None  # budget tokens charged at admission; None: not charged
    overflowed_from: str = ""  # the pool that shed it, when another pool admitted it

    @property
    def label(self) -> str:
        return f"shadow_{self.shadowed}" if self.shadowed is not None else self.reason.value


@dataclass(frozen=True)
class Respond:
    status: int
    body: bytes
    reason: Reason
    headers: Mapping[str, str] = field(default_factory=dict)
    tier: str = ""
    pool: str = ""  # the model pool that would have served it ("" when none was resolved)
    waited: float | None = None  # seconds it was held before this answer; None: at once

    @property
    def label(self) -> str:
        return self.reason.value


Final = Admit | Respond


@dataclass(frozen=True)
class Hold:
    resume: Callable[[], Awaitable[Final]]
    max_wait: float  # seconds; Envoy is told to wait this long (and a little more)
    tier: str = ""


Decision = Admit | Respond | Hold


def admitted_as(decision: Decision, change: Callable[[Admit], Admit]) -> Decision:
    """The decision with `change` made to its admission: now, or once a hold ends in one."""
    if isinstance(decision, Admit):
        return change(decision)
    if isinstance(decision, Hold):
        resume = decision.resume

        async def resumed() -> Final:
            final = admitted_as(await resume(), change)
            assert not isinstance(final, Hold)
            return final

        return dataclasses.replace(decision, resume=resumed)
    return decision


class Decider(Protocol):
    async def decide(self, request: RequestView) -> Decision: ...

    def watch_response(self) -> bool:
        """Whether to have Envoy send this exchange's response (asked as its request
        begins; each watched response costs a gRPC round trip or more)."""
        ...


class AdmitAll:
    """Sends everything upstream unchanged: the policy of a sidecar with QoS off."""

    async def decide(self, request: RequestView) -> Decision:
        return Admit()

    def watch_response(self) -> bool:
        return False
