"""What an address reaches."""

from __future__ import annotations

_LOOPBACK_HOSTS = ("127.", "localhost", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether a listener bound to `host` is reachable from this machine alone."""
    return host.startswith(_LOOPBACK_HOSTS)
