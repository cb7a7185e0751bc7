"""Read and price: what the client sent, read, and the request as its own pool takes it.

Read: the route its method and path take (as the model server routes them), and its
body by that route's API's reader (bodies/). What the sidecar cannot read is refused,
never admitted. Price: the pool that serves its model; its prompt's tokens; the tier's
guards (an output cap written into the body, a prompt too long refused); the fields
beyond a prompt of text its pool takes (policy/extras.py); what it costs
(policy/cost.py); how long it may wait.

How long it may wait: its tier's max_queue_wait_seconds, or less when its TTFT target
leaves less (a stream's target less the time from admission to its first token, foreseen
by queueing/first_token.py), or when its client says so (X-QoS-Max-Wait-Ms: a whole
number of milliseconds from its arrival). A client cannot ask for more than its tier
allows; 0 asks to be served at once or not at all. A stream of a sheddable tier whose
first token is foreseen past its target even if admitted at once is answered at once
(shed_first_token_foreseen): it would be late whatever followed. But for a probe now and
then, when none of its tier was timed for a while: the engine may be fast again
(queueing/forecast.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sidecar.config.pools import Pool
from sidecar.config.schema import TierConfig
from sidecar.config.store import Snapshot
from sidecar.refusals import Reason, Refusal, shed
from sidecar.request.admission.identity import Identity
from sidecar.request.admission.overflow import substitute_allowed
from sidecar.request.admission.request import Asked, Placement
from sidecar.request.bodies.limits import InvalidRequest
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.request.bodies.read import read
from sidecar.request.counting import PromptCounter
from sidecar.request.policy.cost import price, prompt_tokens
from sidecar.request.policy.decision import RequestView
from sidecar.request.policy.extras import extras_tokens
from sidecar.request.policy.guards import apply_guards
from sidecar.request.queueing.first_token import FirstTokenForecaster
from sidecar.routes.kinds import RouteKind
from sidecar.routes.table import Route

log = logging.getLogger(__name__)

MAX_WAIT_HEADER = "x-qos-max-wait-ms"


def route_of(request: RequestView, snapshot: Snapshot) -> Route:
    """The request's route, as the model server routes it."""
    headers = request.headers
    upgrades = "upgrade" in headers or ":protocol" in headers or request.method == "CONNECT"
    return snapshot.routes.resolve(request.method, request.path, upgrades)


def read_body(request: RequestView, route: Route) -> ParsedRequest:
    """The body, read by its route's API's reader; a route the gateway does not serve
    is refused (deny by default)."""
    if route.kind is RouteKind.REFUSE:
        raise Refusal(
            Reason.ROUTE_NOT_FOUND, f"This gateway serves no {request.method} {route.path}."
        )
    try:
        return read(route, request.body or b"", request.headers)
    except Exception as error:
        raise unreadable(error, request.path) from None


def unreadable(error: Exception, path: str) -> Refusal:
    """What a client sent and the sidecar cannot read is refused, never admitted: its
    reader's refusal, or any error reading it raised (logged as a bug). Caught where it
    is read rather than by a context manager: no call at all on every request that reads
    well. (Cancellation and interrupts are no Exception: they pass.)"""
    if isinstance(error, Refusal):
        return error
    if isinstance(error, InvalidRequest):
        return Refusal(Reason.INVALID_REQUEST, error.message, param=error.param)
    log.warning("reading a request failed; refused", exc_info=error, extra={"path": path})
    return Refusal(Reason.INVALID_REQUEST, "The request body could not be read as this API's.")


def pool_for(snapshot: Snapshot, model: str | None) -> Pool:
    """The pool serving `model`; a model no pool serves is answered as vLLM answers it."""
    pool = snapshot.pools.for_model(model)
    if pool is None:
        raise Refusal(
            Reason.MODEL_NOT_FOUND,
            f"The model `{model}` does not exist."
            if model
            else "This gateway serves several models: name one in `model`.",
            param="model",
        )
    return pool


class Pricing:
    def __init__(self, count: PromptCounter, first_tokens: FirstTokenForecaster | None) -> None:
        self._count = count
        # Foresees a stream's time from admission to its first token (None: not here).
        self._first_tokens = first_tokens

    def price(
        self,
        request: RequestView,
        snapshot: Snapshot,
        identity: Identity,
        parsed: ParsedRequest,
        pool: Pool,
    ) -> Placement:
        tier, settings = identity.tier, pool.tiers[identity.tier]
        try:
            extra = extras_tokens(parsed.extras, pool.extras, parsed.model)
            counted = self._count(parsed, pool.template.unrendered) + extra
            tokens = prompt_tokens(parsed.prompt, counted, snapshot.config.media)
            guarded = apply_guards(parsed, settings, tier.value, tokens)
            charge = price(settings, tokens, parsed.output)
        except Exception as error:
            raise unreadable(error, request.path) from None
        leaves = first_token = None
        if self._first_tokens is not None and parsed.stream and snapshot.config.queue.foresee_waits:
            first_token = self._first_tokens.foresee(tier, pool, charge.asked)
            leaves = pool.slo[tier].ttft_ms / 1000 - first_token.seconds
            late = leaves <= 0 and settings.sheddable
            # A probe is to be timed: one whose response is watched (sampled at its headers).
            watched = request.response_watched
            probed = late and watched and self._first_tokens.probe(tier, pool, first_token)
            if late and not probed:
                raise shed(Reason.SHED_FIRST_TOKEN_FORESEEN, tier.value)
            leaves -= first_token.growth  # the wait's end foreseen later than now
        wait = max_wait(request.headers, settings, leaves)
        asked = Asked(request, snapshot, identity, parsed, substitute_allowed(request.headers))
        return Placement(asked, pool, settings, guarded, charge, wait, first_token=first_token)


def max_wait(
    headers: Mapping[str, str], tier: TierConfig, target_leaves: float | None = None
) -> float:
    """Seconds the request may wait (headers by lower-case name; `target_leaves`: what
    its TTFT target leaves for waiting, None when not known)."""
    limit = tier.max_queue_wait_seconds
    if target_leaves is not None:
        limit = max(0.0, min(limit, target_leaves))
    asked = headers.get(MAX_WAIT_HEADER)
    if asked is None:
        return limit
    text = asked.strip()
    if not text.isdigit() or not text.isascii():
        raise Refusal(
            Reason.INVALID_REQUEST,
            f"The header {MAX_WAIT_HEADER} must be a whole number of milliseconds "
            f"(0 or more), not {asked[:40]!r}.",
        )
    return min(limit, int(text) / 1000)
