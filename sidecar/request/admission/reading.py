"""Read: what the client sent, as the model server would take it. The route its method
and path take (as the model server routes them), its body by that route's API's reader
(bodies/), and the pool that serves its model. What the sidecar cannot read is refused,
never admitted."""

from __future__ import annotations

import logging

from sidecar.config.pools import Pool
from sidecar.config.snapshot import Snapshot
from sidecar.refusals import Reason, Refusal
from sidecar.request.bodies.limits import InvalidRequest
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.request.bodies.read import read
from sidecar.request.policy.decision import RequestView
from sidecar.routes.kinds import RouteKind
from sidecar.routes.table import Route

log = logging.getLogger(__name__)


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
