"""An OTLP/HTTP receiver that accepts every export and keeps nothing: somewhere for a
tracing sidecar to send its spans during a benchmark, so that the cost measured is the
sidecar's own (recording, batching, encoding, sending), not a collector's."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sidecar.ports import free_port


class _Accept(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")  # an empty ExportTraceServiceResponse
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def running_sink() -> Iterator[str]:
    """The receiver's base URL (OTEL_EXPORTER_OTLP_ENDPOINT), for the block."""
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Accept)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
