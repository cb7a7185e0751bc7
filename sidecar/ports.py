"""Free loopback ports, for worker processes and the stacks the tests start.

A port the kernel picks (bind to port 0) comes from its ephemeral range, the same range
outgoing connections take their local ports from: between its choice and the server's
bind, a client connection may take it. So ports are chosen below that range, at random,
each at most once per process, and checked free by a bind.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_SPAN = 12_000  # ports below the ephemeral range to choose from
_given: set[int] = set()


def free_port() -> int:
    low = _ephemeral_low()
    for _ in range(500):
        port = random.randrange(max(1024, low - _SPAN), low)
        if port not in _given and _bindable(port):
            _given.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # nothing free below
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
        _given.add(port)
        return port


def _ephemeral_low() -> int:
    try:
        return int(_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
