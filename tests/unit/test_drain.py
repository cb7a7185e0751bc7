"""drain-envoy's waiting, against a stand-in of Envoy's admin API on loopback: it waits
while requests are in flight, and while Envoy is too busy to answer; not once Envoy is
gone; and never past the longest answer."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from sidecar.operator import drain
from sidecar.ports import free_port


class _Admin(http.server.BaseHTTPRequestHandler):
    in_flight: ClassVar[list[int]] = []  # each /stats answer, the last one repeated
    stall_seconds: ClassVar[float] = 0.0

    def do_GET(self) -> None:
        time.sleep(self.stall_seconds)  # a busy Envoy's admin thread
        value = self.in_flight.pop(0) if len(self.in_flight) > 1 else self.in_flight[0]
        body = json.dumps({"stats": [{"name": drain.IN_FLIGHT_STAT, "value": value}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def admin() -> Iterator[tuple[str, type[_Admin]]]:
    handler = type("Admin", (_Admin,), {"in_flight": [0], "stall_seconds": 0.0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_it_waits_while_requests_are_in_flight(admin, monkeypatch):
    url, handler = admin
    handler.in_flight[:] = [3, 2, 1, 0]
    monkeypatch.setattr(drain, "POLL_SECONDS", 0.01)
    assert drain._wait_until_idle(url, 10) == 0
    assert handler.in_flight == [0]  # every answer read


def test_an_admin_too_busy_to_answer_is_not_taken_for_gone(admin, monkeypatch):
    url, handler = admin
    handler.stall_seconds = 2.5  # past the poll's 2 s
    monkeypatch.setattr(drain, "POLL_SECONDS", 0.01)
    started = time.monotonic()
    assert drain._wait_until_idle(url, 4) == 1  # still held when the time was up
    assert time.monotonic() - started >= 4


def test_envoy_gone_ends_the_wait_and_the_longest_answer_bounds_it(admin, monkeypatch):
    monkeypatch.setattr(drain, "POLL_SECONDS", 0.01)
    assert drain._wait_until_idle(f"http://127.0.0.1:{free_port()}", 10) == 0
    url, handler = admin
    handler.in_flight[:] = [5]
    started = time.monotonic()
    assert drain._wait_until_idle(url, 0.3) == 5
    assert time.monotonic() - started < 5
