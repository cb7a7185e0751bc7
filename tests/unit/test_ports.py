"""Free ports come from below the kernel's ephemeral range, each once, and bind."""

from __future__ import annotations

import socket

from sidecar.ports import _bindable, _ephemeral_low, free_port


def test_ports_are_below_the_ephemeral_range_distinct_and_free():
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(1024 <= port < _ephemeral_low() for port in ports)
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))  # raises if it were taken


def test_a_port_another_socket_holds_counts_as_taken():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert not _bindable(port)
    assert _bindable(port)  # free again once closed
