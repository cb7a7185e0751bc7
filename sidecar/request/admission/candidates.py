"""Candidates: where a request may be served, in order, less those that shed it for load.
Its own pool first; then, degrade, don't refuse: should its pool shed it for load (the
watermarks, the in-flight rule, no pod reporting) or for the pool's tier budget, the pools
its tier overflows to (`pools.NAME.tiers.pN.overflow`), in order. Which of them serves it
is decided by one mechanism: `admissible` drops those shed for load, and the budget stage
takes the first whose budgets admit it, offering the next in the same Redis call.

Shed for load, before any budget is asked for: by the operator's mode (core-only, forced
sheds) or by the rules the load monitor keeps in force (the KV and in-flight watermarks,
no pod reporting: loops/overload/shedding.py), as the decision read them. Decided without
Redis.

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

from sidecar.config.base import Tier
from sidecar.config.extras import Extra
from sidecar.config.operator_state import Mode
from sidecar.config.pools import Pool
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.shedding import SheddingState
from sidecar.refusals import Reason, Refusal, shed
from sidecar.request.admission.request import Placement
from sidecar.request.bodies.extras import extras_tokens
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.request.policy.cost import price
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
class Candidates:
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


def choose_pools(home: Placement) -> Candidates:
    """Its own pool, and each pool its tier overflows to as that pool would take it."""
    names = home.settings.overflow
    if not names or not home.request.substitute or not _portable(home.request.parsed):
        return Candidates(home)
    pools = home.request.snapshot.pools
    moved = (_moved(home, target) for target in map(pools.get, names) if target is not None)
    return Candidates(home, tuple(place for place in moved if place is not None))


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
    parsed, tier = home.request.parsed, home.tier
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


def admissible(candidates: Candidates) -> Candidates:
    """The candidates that do not shed the request for load. Its own pool shedding it for
    one of OVERFLOW_REASONS leaves the others; for another reason (core-only, a forced
    shed) it is refused."""
    home = candidates.home
    state = home.request.shedding
    reason = _sheds(home, state)
    if reason is None and not candidates.elsewhere:
        return candidates  # its own pool alone, and it takes it
    elsewhere = tuple(place for place in candidates.elsewhere if not _sheds(place, state))
    if reason is None:
        return Candidates(home, elsewhere)
    own = state.for_pool(home.pool.name)
    # The rule's own forecast of when the tier is back (none for the operator's sheds).
    foreseen = own.recovery[home.tier] if reason is own.shedding[home.tier] else None
    refusal = shed(reason, home.tier.value, foreseen)
    if reason not in OVERFLOW_REASONS or not elsewhere:
        raise refusal
    return Candidates(home, elsewhere, home_shed=refusal)


def _sheds(place: Placement, state: SheddingState) -> Reason | None:
    return overload_refusal(place.tier, place.request.snapshot, state.for_pool(place.pool.name))


def overload_refusal(tier: Tier, snapshot: Snapshot, state: SheddingState) -> Reason | None:
    """Why `tier` is shed before any budget is asked for, or None to go on."""
    mode = snapshot.mode
    if mode.mode is Mode.CORE_ONLY and tier is not Tier.P0:
        return Reason.SHED_CORE_ONLY
    if tier in mode.force_shed:
        return Reason.SHED_FORCED
    return state.shedding[tier]


def overflow_header(place: Placement, shed: Reason) -> str:
    """What the client is told of a request served by another pool than its own."""
    return f"{place.pool.name}; from={place.overflowed_from}; reason={shed.value}"
