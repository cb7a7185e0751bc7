"""What the sidecar decides for one request, and the pluggable piece that decides it.

A decider sees the request as Envoy presented it (headers, buffered body) and returns
Admit (send it upstream: what Envoy changes on its way, and the admission's record) or
Respond (answer it here; nothing goes upstream). A request that must wait first is held:
the decider calls `hold` with the longest it may wait before it waits, so that Envoy is
told to wait that long for the answer. The ext_proc state machine turns each into
Envoy messages; deciders never touch the protocol.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from sidecar.refusals import Reason


class Admitted(enum.StrEnum):
    """Why a request was sent upstream (the `reason` label of qos_decisions_total)."""

    ADMITTED = "admitted"  # within its budgets, with a slot
    OVER_BUDGET = "admitted_over_budget"  # its tier is never shed for budget
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
    # Envoy's Lua filter reads and edits this exchange's streamed usage (tags.py).
    reads_usage: bool = False


@dataclass(frozen=True)
class Upstream:
    """What Envoy is told to change on an admitted request before it goes upstream."""

    set_headers: Mapping[str, str] = field(default_factory=dict)
    remove_headers: tuple[str, ...] = ()
    replace_body: bytes | None = None
    reroute: bool = False  # the headers set choose the route: Envoy must choose it again
    slot: str = ""  # the slot it holds, for the access log to name (tags.EXCHANGE_NAMESPACE)
    usage: str = ""  # what Envoy does with its stream's usage (policy/stream_usage.py)


@dataclass(frozen=True)
class FirstTokenForecast:
    """Seconds from admission to a stream's first token, by what they are foreseen for
    (queueing/first_token.py)."""

    engine_queue: float  # behind what the engines already hold
    rest: float | None  # the way there and the prefill, as lately; None: not known yet
    growth: float = 0.0  # how much later it is foreseen after a wait, as lately

    @property
    def seconds(self) -> float:
        return self.engine_queue + (self.rest or 0.0)


@dataclass(frozen=True)
class Admission:
    """The record of an admission: what was taken and why, for the metrics, the timing of
    its first token and its exchange's end."""

    reason: Admitted = Admitted.ADMITTED
    tier: str = ""
    pool: str = ""  # the model pool that serves it ("" when none was resolved)
    tenant: str = ""  # who sent it, as the metrics and logs name tenants
    route: str = ""  # the route's kind (sidecar/routes/kinds.py), when it was charged
    cost: float | None = None  # budget tokens charged at admission; None: not charged
    slot: str = ""  # the in-flight slot taken, to give back when the exchange ends
    queue_wait: float | None = None  # seconds waited for the slot
    foreseen_wait: float | None = None  # seconds its wait was foreseen to take, if it was
    first_token: FirstTokenForecast | None = None  # a stream's, foreseen at its pricing
    first_token_again: FirstTokenForecast | None = None  # ...and at admission, after a wait
    overflowed_from: str = ""  # the pool that shed it, when another pool admitted it
    shadowed: Reason | None = None  # in shadow mode, why it would have been refused
    time_first_byte: bool = False  # watch the response body for the first token's time
    prompt_tokens: int = 0  # its prompt's, as charged: the KV it takes while it runs

    @property
    def label(self) -> str:
        return f"shadow_{self.shadowed}" if self.shadowed is not None else self.reason.value


@dataclass(frozen=True)
class Admit:
    upstream: Upstream = field(default_factory=Upstream)
    record: Admission = field(default_factory=Admission)


@dataclass(frozen=True)
class Respond:
    status: int
    body: bytes
    reason: Reason
    headers: Mapping[str, str] = field(default_factory=dict)
    tier: str = ""
    pool: str = ""  # the model pool that would have served it ("" when none was resolved)
    waited: float | None = None  # seconds it was held before this answer; None: at once
    tenant: str = ""  # who sent it, when known
    route: str = ""  # the route's kind, when known

    @property
    def label(self) -> str:
        return self.reason.value


Decision = Admit | Respond

# Tells Envoy the answer may take up to this many seconds: called once, before a wait.
Hold = Callable[[float], Awaitable[None]]


async def no_hold(seconds: float) -> None:
    """For a caller that has nobody to tell (a test, a benchmark in process)."""


@dataclass(frozen=True)
class ResponseWatch:
    """Why Envoy is to send an exchange's response, asked as its request begins (each
    watched response costs a gRPC round trip or more)."""

    sampled: bool = False  # its first token timed, for the SLO
    evictable: bool = False  # its tier's streams may be ended early: followed throughout

    def __bool__(self) -> bool:
        return self.sampled or self.evictable


UNWATCHED = ResponseWatch()


class Decider(Protocol):
    async def decide(self, request: RequestView, hold: Hold = no_hold) -> Decision: ...

    def watch_response(self, headers: Mapping[str, str]) -> ResponseWatch:
        """Whether to have Envoy send this exchange's response, and why (`headers`: its
        request's, lower-cased)."""
        ...


class AdmitAll:
    """Sends everything upstream unchanged: the policy of a sidecar with QoS off."""

    async def decide(self, request: RequestView, hold: Hold = no_hold) -> Decision:
        return Admit()

    def watch_response(self, headers: Mapping[str, str]) -> ResponseWatch:
        return UNWATCHED
