"""The answer to an admitted request: what Envoy changes on its way upstream (the
sidecar's tags, the engine's fields, a rewritten body, and none of the headers a client
may not send) and the admission's record. Pure."""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.config.pools import DEFAULT_POOL
from sidecar.request.admission.budget import Budgeted
from sidecar.request.admission.candidates import OVERFLOW_HEADER, overflow_header
from sidecar.request.admission.identity import Identity
from sidecar.request.admission.request import Placement
from sidecar.request.policy.decision import (
    Admission,
    Admit,
    Admitted,
    RequestView,
    Respond,
    Upstream,
)
from sidecar.request.policy.scheduling import (
    CLIENT_MAY_NOT_SEND,
    CONTROL_HEADERS,
    VLLM_HEADER_PREFIX,
    EngineFields,
    engine_fields,
    inference_headers,
)
from sidecar.request.policy.stream_usage import READ, usage_ask
from sidecar.request.policy.tags import (
    INTERNAL_PREFIX,
    LOGGED_HEADERS,
    POOL_HEADER,
    QUEUE_WAIT_HEADER,
    SLOT_HEADER,
    TENANT_HEADER,
    TIER_HEADER,
)
from sidecar.request.queueing.waiting import Turn


def admitted(budgeted: Budgeted, turn: Turn) -> Admit:
    """Sent upstream to the pool that took it, tagged and scheduled by its tier."""
    place = budgeted.place
    request = place.request
    engine, usage = _engine(place)
    tags = dict(engine.headers)
    if turn.slot:
        waited_ms = f"{(turn.waited or 0.0) * 1000:.0f}"
        tags[QUEUE_WAIT_HEADER] = waited_ms
    if budgeted.moved_for is not None:
        tags[OVERFLOW_HEADER] = overflow_header(place, budgeted.moved_for)
    identity = request.identity
    tier, tenant = identity.tier.value, identity.tenant_label
    tags |= inference_headers(request.snapshot.config.inference_extension, tier, tenant)
    upstream = tagged(request.view, tier, tenant, engine.body, tags, turn.slot, usage)
    record = Admission(
        budgeted.reason,
        tier,
        place.pool.name,
        tenant,
        request.parsed.kind.value,
        place.charge.reserved,
        slot=turn.slot,
        queue_wait=turn.waited if turn.slot else None,
        foreseen_wait=turn.foreseen,
        first_token=place.first_token,
        first_token_again=turn.first_token,
        overflowed_from=place.overflowed_from,
        # Time this stream's first token: its response body will be watched.
        time_first_byte=bool(turn.slot) and request.parsed.stream and request.view.response_watched,
        prompt_tokens=place.charge.prompt_tokens,
    )
    return Admit(upstream, record)


def passed(request: RequestView, identity: Identity) -> Admit:
    """A request that makes no GPU work: tagged, not charged."""
    upstream = tagged(request, identity.tier.value, identity.tenant_label, None)
    return Admit(upstream, Admission(tier=identity.tier.value, tenant=identity.tenant_label))


def shadowed(request: RequestView, refused: Respond, default_tier: str) -> Admit:
    """Shadow mode: the refusal is made and counted, the request goes through untouched
    (routed to the pool that would have served it)."""
    routed = refused.pool not in ("", DEFAULT_POOL)
    route = {POOL_HEADER: refused.pool} if routed else {}
    tier = refused.tier or default_tier
    upstream = tagged(request, tier, "shadow", None, route)
    record = Admission(Admitted.SHADOW, tier, refused.pool, refused.tenant, shadowed=refused.reason)
    return Admit(upstream, record)


# Stripped from every admitted request, seen or not (Envoy may show the sidecar only some
# headers: see messages.attribute_headers): those the sidecar's own machinery reads, and
# the engine's and the Inference Extension's instructions.
_ALWAYS_STRIPPED = tuple(
    dict.fromkeys((*LOGGED_HEADERS, SLOT_HEADER, *CONTROL_HEADERS, *CLIENT_MAY_NOT_SEND))
)
# And every one seen under these: the sidecar's internal headers, anything vLLM may read.
_STRIPPED_PREFIXES = (INTERNAL_PREFIX, VLLM_HEADER_PREFIX)


def tagged(
    request: RequestView,
    tier: str,
    tenant: str,
    body: dict[str, Any] | None,
    extra: dict[str, str] | None = None,
    slot: str = "",
    usage: str = "",
) -> Upstream:
    """With the sidecar's tags; internal headers and engine instructions a client sent
    never go upstream."""
    tags = {TIER_HEADER: tier, TENANT_HEADER: tenant, **(extra or {})}
    seen = [name for name in request.headers if name.startswith(_STRIPPED_PREFIXES)]
    stripped = dict.fromkeys(n for n in (*seen, *_ALWAYS_STRIPPED) if n not in tags)
    replacement = None
    if body is not None:
        replacement = msgspec.json.encode(body)  # compact, UTF-8 as it came
    return Upstream(tags, tuple(stripped), replacement, POOL_HEADER in tags, slot, usage)


def _engine(place: Placement) -> tuple[EngineFields, str]:
    """The body and headers vLLM schedules by (the tier's priority, never the client's),
    with pools configured the pool Envoy routes the request to, and for a stream whose
    output is settled, or that may be ended early (its closing says the usage so far),
    the usage asked of the engine and what Envoy does with it ("" for nothing)."""
    parsed = place.request.parsed
    config = place.request.snapshot.config
    body = place.body if place.body is not None else parsed.body
    changed = place.body is not None
    usage_mode = ""
    evictable = place.settings.evictable and config.overload.evict_below_free_kv is not None
    if (place.reservation is not None or evictable) and parsed.stream:
        # Asked of the engine only where Envoy's Lua filter takes out what the client
        # did not ask for (and reads it): elsewhere the stream goes as it came.
        if parsed.stream_usage is not None and place.request.view.reads_usage:
            ask = usage_ask(
                parsed.stream_usage,
                body.get("stream_options"),
                parsed.shape.choices,
                config.engine.force_include_usage,
            )
            if ask.stream_options is not None:
                body, changed = {**body, "stream_options": ask.stream_options}, True
            usage_mode = ask.mode
        elif parsed.usage_in_stream:  # it carries its usage anyway (asked, or the API does)
            usage_mode = READ
    fields = engine_fields(
        body if parsed.json_body else None,
        changed,
        config.engine.send_priority,
        place.settings.vllm_priority,
        parsed.body_priority,
    )
    if place.pool.name != DEFAULT_POOL:
        fields.headers[POOL_HEADER] = place.pool.name
    return fields, usage_mode
