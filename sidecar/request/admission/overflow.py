"""Degrade, don't refuse: a request its pool sheds for load (the watermarks, the in-flight
rule, no pod reporting) or for the pool's tier budget is offered to the pools its tier
overflows to (`pools.NAME.tiers.pN.overflow`), in order. The first that admits it serves
it: routed there, the body's `model` rewritten to that pool's model, charged to that
pool's budgets (its tenant's own as usual) and counted in its load. One hop at most;
never for a client that refuses a substitute (X-QoS-Substitute: no), nor for a request
the pool's model cannot take (its prompt and max_tokens against max_model_len; anything
but text in and text out: embeddings, media, token ids, a conversation the own pool's
engine stored). The client is told: the answer's `model` is the model
that answered, and X-QoS-Overflow names the pool and why (Envoy copies it from the
request the sidecar tagged). Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sidecar.config.pools import Pool
from sidecar.refusals import Reason, Refusal
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.request.policy.cost import price
from sidecar.request.policy.decision import Decision, admitted_as
from sidecar.request.policy.guards import apply_guards
from sidecar.routes.kinds import RouteKind

if TYPE_CHECKING:  # the request carries an Overflow: imported for its type only
    from sidecar.request.admission.request import AdmissionRequest

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
class Overflow:
    source: str  # the pool that shed it
    reason: Reason  # why it did

    def header(self, target: str) -> str:
        return f"{target}; from={self.source}; reason={self.reason.value}"


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


def elsewhere(request: AdmissionRequest, shed: Reason) -> Iterator[AdmissionRequest]:
    """The request its pool sheds for `shed` as each pool its tier overflows to would
    take it, in order; none when it may not overflow."""
    if (
        request.overflow is not None
        or not request.substitute
        or shed not in OVERFLOW_REASONS
        or not _portable(request.parsed)
    ):
        return
    overflow = Overflow(request.pool.name, shed)
    for name in request.tier_config.overflow:
        target = request.snapshot.pools.get(name)
        if target is not None:
            moved = _moved(request, target, overflow)
            if moved is not None:
                yield moved


def _portable(parsed: ParsedRequest) -> bool:
    """Whether another model takes the request as it is: text in and text out, the model
    named in its JSON body; no media (a smaller model may read none), no conversation
    its own pool's engine stored, no token ids (another model's vocabulary)."""
    prompt = parsed.prompt
    if parsed.kind not in PORTABLE or not parsed.json_body or "model" not in parsed.body:
        return False
    if prompt.media or prompt.stored_context or prompt.audio_bytes:
        return False
    given = parsed.body.get("prompt")
    return not (isinstance(given, list) and any(not isinstance(part, str) for part in given))


def _moved(request: AdmissionRequest, target: Pool, overflow: Overflow) -> AdmissionRequest | None:
    parsed, tier = request.parsed, request.tier
    prompt = request.charge.prompt_tokens
    asked = parsed.output.requested if parsed.output is not None else None
    if target.max_model_len is None or prompt + (asked or 0) > target.max_model_len:
        return None  # its model cannot take it
    settings = target.tiers[tier]
    try:
        guarded = apply_guards(parsed, settings, tier.value, prompt)
    except Refusal:
        return None  # refused there for its own limits: no better than the fallback
    body = dict(guarded if guarded is not None else parsed.body)  # its own guards, not ours
    body["model"] = target.model
    return dataclasses.replace(
        request,
        pool=target,
        body=body,
        charge=price(settings, prompt, parsed.output),
        max_wait=min(request.max_wait, settings.max_queue_wait_seconds),
        overflow=overflow,
    )


def marked(decision: Decision, request: AdmissionRequest) -> Decision:
    """An admission elsewhere, tagged with where it went and why (also once held)."""
    overflow = request.overflow
    assert overflow is not None
    told = {OVERFLOW_HEADER: overflow.header(request.pool.name)}
    return admitted_as(
        decision,
        lambda admit: dataclasses.replace(
            admit, set_headers={**admit.set_headers, **told}, overflowed_from=overflow.source
        ),
    )
