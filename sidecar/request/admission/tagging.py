"""What an admitted request carries upstream: the sidecar's tags, the engine's fields,
and none of the headers a client may not send. Pure."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sidecar.config.pools import DEFAULT_POOL, Pool
from sidecar.request.admission.identity import Identity
from sidecar.request.completion.access_log import LOGGED_HEADERS
from sidecar.request.policy.decision import Admit, Admitted, RequestView, Respond
from sidecar.request.policy.engine import EngineFields, client_control_headers

INTERNAL_PREFIX = "x-qos-"
# Envoy routes on it to the cluster named after the pool (route cluster_header); set by
# the sidecar only, for every pool but the default one, whose cluster is Envoy's fallback.
POOL_HEADER = "x-qos-pool"
# Marks a stream whose usage Envoy is to read for its settlement.
USAGE_HEADER = "x-qos-usage"


def admit(
    request: RequestView,
    identity: Identity,
    engine: EngineFields | None = None,
    reason: Admitted = Admitted.ADMITTED,
    slot: str = "",
    waited: float | None = None,
    pool: Pool | None = None,
) -> Admit:
    extra = dict(engine.headers) if engine else {}
    if slot:
        extra |= {"x-qos-slot": slot, "x-qos-queue-wait-ms": f"{(waited or 0.0) * 1000:.0f}"}
    body = engine.body if engine else None
    admit = tagged(request, identity.tier.value, identity.tenant_label, body, reason, extra)
    return dataclasses.replace(
        admit,
        slot=slot,
        queue_wait=waited if slot else None,
        reroute=POOL_HEADER in extra,
        pool=pool.name if pool else "",
    )


def tagged(
    request: RequestView,
    tier: str,
    tenant: str,
    body: dict[str, Any] | None,
    reason: Admitted,
    extra: dict[str, str] | None = None,
) -> Admit:
    """Admit with the sidecar's tags; internal headers and engine instructions a client
    sent never go upstream."""
    tags = {"x-qos-tier": tier, "x-qos-tenant": tenant, **(extra or {})}
    # Those seen, and the ones the sidecar's own machinery reads whether seen or not
    # (Envoy may show the sidecar only some headers: see messages.attribute_headers).
    present = (name for name in request.headers if name.startswith(INTERNAL_PREFIX))
    engine = client_control_headers(request.headers)
    stripped = dict.fromkeys(n for n in (*present, *LOGGED_HEADERS, *engine) if n not in tags)
    replacement = None
    if body is not None:
        replacement = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return Admit(
        set_headers=tags,
        remove_headers=tuple(stripped),
        replace_body=replacement,
        reason=reason,
        tier=tier,
    )


def shadowed(request: RequestView, refused: Respond, default_tier: str) -> Admit:
    """Shadow mode: the refusal is made and counted, the request goes through untouched
    (routed to the pool that would have served it)."""
    routed = refused.pool not in ("", DEFAULT_POOL)
    route = {POOL_HEADER: refused.pool} if routed else {}
    admit = tagged(request, refused.tier or default_tier, "shadow", None, Admitted.SHADOW, route)
    return dataclasses.replace(admit, shadowed=refused.reason, pool=refused.pool, reroute=routed)
