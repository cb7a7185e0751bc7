"""Choose the pool: where a request may be served, in order. Its own pool first; then,
degrade, don't refuse: should its pool shed it for load (the watermarks, the in-flight
rule, no pod reporting) or for the pool's tier budget, the pools its tier overflows to
(`pools.NAME.tiers.pN.overflow`), in order. Which of them serves it is decided by one
mechanism: the overload stage drops those shed for load, and the budget stage takes the
first whose budgets admit it, offering the next in the same Redis call.

A request served elsewhere is routed there, the body's `model` rewritten to that pool's
model, charged to that pool's budgets (its tenant's own as usual) under its guards, and
counted in its load. One hop at most; never for a client that refuses a substitute
(X-QoS-Substitute: no), nor for a request the pool's model cannot take (its prompt and
max_tokens against max_model_len; anything but text in and text out: embeddings, media,
token ids, a conversation the own pool's engine stored, fields beyond a prompt of text
but a structured output the other pool takes: config/extras.py). The client is told: the
answer's `model` is the model that answered, and X-QoS-Overflow names the pool and why
(Envoy copies it from the request the sidecar tagged). Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.config.extras import Extra
from sidecar.config.pools import Pool
from sidecar.refusals import Reason, Refusal
from sidecar.request.admission.request import Placement
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.request.policy.cost import price
from sidecar.request.policy.extras import extras_tokens
from sidecar.request.policy.guards import apply_guards
from sidecar.routes.kinds import RouteKind

# What sheds a request for its pool's sake, which another pool may not suffer from.
OVERFLOW_REASONS = frozenset(
    {
        Reason.SHED_KV_WATERMARK,
        Reason.SHED_INFLIGHT,
        Reason.SHED_NO_REPORTS,
        Reason.SHED_TIER_BUDGET,
    }
)
# The routes whose requests another model can answer: text generated from text.
PORTABLE = frozenset(
    {
        RouteKind.CHAT,
        RouteKind.COMPLETIONS,
        RouteKind.CHAT_BATCH,
        RouteKind.RESPONSES,
        RouteKind.MESSAGES,
        RouteKind.COHERE_CHAT,
    }
)
# A client's "no": it wants the model it named or the fallback.
SUBSTITUTE_HEADER = "x-qos-substitute"
# Upstream, and copied by Envoy into the response: "<pool>; from=<pool>; reason=<reason>".
OVERFLOW_HEADER = "x-qos-overflow"


@dataclass(frozen=True)
class Places:
    """Where a request may be served, in order."""

    home: Placement  # its own pool
    # The pools its tier overflows to that can take it: tried once its own pool sheds it
    # for one of OVERFLOW_REASONS.
    elsewhere: tuple[Placement, ...] = ()
    # Its own pool sheds it for load: served elsewhere, or refused so.
    home_shed: Refusal | None = None


def substitute_allowed(headers: Mapping[str, str]) -> bool:
    """Whether the client takes an answer from another model (headers by lower-case
    name): `yes` (the default) or `no`."""
    asked = headers.get(SUBSTITUTE_HEADER)
    if asked is None:
        return True
    answer = asked.strip().lower()
    if answer not in ("yes", "no"):
        raise Refusal(
            Reason.INVALID_REQUEST,
            f"The header {SUBSTITUTE_HEADER} must be yes or no, not {asked[:40]!r}.",
        )
    return answer == "yes"


def choose_pools(home: Placement) -> Places:
    """Its own pool, and each pool its tier overflows to as that pool would take it."""
    names = home.settings.overflow
    if not names or not home.asked.substitute or not _portable(home.asked.parsed):
        return Places(home)
    pools = home.asked.snapshot.pools
    moved = (_moved(home, target) for target in map(pools.get, names) if target is not None)
    return Places(home, tuple(place for place in moved if place is not None))


def _portable(parsed: ParsedRequest) -> bool:
    """Whether another model takes the request as it is: text in and text out, the model
    named in its JSON body; no media (a smaller model may read none), no conversation
    its own pool's engine stored, no token ids (another model's vocabulary)."""
    prompt = parsed.prompt
    if parsed.kind not in PORTABLE or not parsed.json_body or "model" not in parsed.body:
        return False
    if prompt.media or prompt.stored_context or prompt.audio_bytes:
        return False
    if any(field.extra is not Extra.LARGE_GRAMMARS for field in parsed.extras):
        return False  # embeddings, a template, engine arguments: for its own model only
    given = parsed.body.get("prompt")
    return not (isinstance(given, list) and any(not isinstance(part, str) for part in given))


def _moved(home: Placement, target: Pool) -> Placement | None:
    """The request as `target` takes it; None when its model cannot, or its guards
    refuse it there (no better than the fallback)."""
    parsed, tier = home.asked.parsed, home.tier
    prompt = home.charge.prompt_tokens
    asked = parsed.output.requested if parsed.output is not None else None
    if target.max_model_len is None or prompt + (asked or 0) > target.max_model_len:
        return None
    settings = target.tiers[tier]
    try:
        extras_tokens(parsed.extras, target.extras, target.model)  # its grammars' size
        guarded = apply_guards(parsed, settings, tier.value, prompt)
    except Refusal:
        return None
    body = dict(guarded if guarded is not None else parsed.body)  # its own guards, not ours
    body["model"] = target.model
    return dataclasses.replace(
        home,
        pool=target,
        settings=settings,
        body=body,
        charge=price(settings, prompt, parsed.output),
        max_wait=min(home.max_wait, settings.max_queue_wait_seconds),
        overflowed_from=home.pool.name,
        first_token=None,  # foreseen in its own pool, not this one
    )


def overflow_header(place: Placement, shed: Reason) -> str:
    """What the client is told of a request served by another pool than its own."""
    return f"{place.pool.name}; from={place.overflowed_from}; reason={shed.value}"
