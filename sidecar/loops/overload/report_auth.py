"""The proof a pushed load report carries: the shared token, as a bearer token in the
call's gRPC metadata. Without it anyone who reaches the gRPC port could say a pod is full
(and have a tier shed) or idle (and hide real load)."""

from __future__ import annotations

import hmac
from collections.abc import Iterable

HEADER = "authorization"
_SCHEME = "Bearer "


def credentials(token: str) -> tuple[tuple[str, str], ...]:
    """The metadata a reporter sends with each report."""
    return ((HEADER, _SCHEME + token),)


def refusal(token: str, metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """Why a report with this metadata is refused, or None when it carries `token`."""
    if not token:
        return "this sidecar takes no pushed reports: its QOS_REPORT_TOKEN is unset"
    given = next((value for key, value in metadata or () if key == HEADER), None)
    if not isinstance(given, str) or not given.startswith(_SCHEME):
        return "no report token (metadata authorization: Bearer TOKEN)"
    if not hmac.compare_digest(given[len(_SCHEME) :].encode(), token.encode()):
        return "wrong report token"
    return None
