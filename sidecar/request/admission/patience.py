"""How long a request may wait for admission: its tier's max_queue_wait_seconds, or less
when its TTFT target leaves less (a stream's target less the time streams of its tier
and pool take lately from admission to their first token), or when its client says so
(X-QoS-Max-Wait-Ms: a whole number of milliseconds from its arrival). A client cannot
ask for more than its tier allows; 0 asks to be served at once or not at all."""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.config.base import Tier
from sidecar.config.pools import Pool
from sidecar.config.schema import TierConfig
from sidecar.config.store import Snapshot
from sidecar.refusals import Reason, Refusal
from sidecar.request.queueing.forecast import FirstTokenTimes

MAX_WAIT_HEADER = "x-qos-max-wait-ms"


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


def target_leaves(
    first_tokens: FirstTokenTimes, snapshot: Snapshot, tier: Tier, pool: Pool
) -> float | None:
    """Seconds a stream's TTFT target leaves for its wait, after the time its tier's
    streams took lately from admission to their first token (queueing/forecast.py; None:
    not foreseen)."""
    if not snapshot.config.queue.foresee_waits:
        return None
    took = first_tokens.most_took(tier, pool.name)
    if took is None:
        return None
    return pool.slo[tier].ttft_ms / 1000 - took
