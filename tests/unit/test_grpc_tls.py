"""Plaintext for loopback only; TLS files given whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.grpc_tls import TlsFiles, check_listener

FILES = TlsFiles(Path("c.pem"), Path("k.pem"), None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3"])
def test_a_reachable_port_needs_tls_or_plaintext_said_outright(host):
    with pytest.raises(SystemExit, match="--tls-cert-file"):
        check_listener(host, None, plaintext_allowed=False)
    check_listener(host, FILES, plaintext_allowed=False)
    check_listener(host, None, plaintext_allowed=True)


def test_loopback_may_stay_plaintext():
    check_listener("127.0.0.1", None, plaintext_allowed=False)


def test_tls_files_come_whole():
    assert TlsFiles.given("", "", "", "flags") is None
    assert TlsFiles.given("c", "k", "", "flags") == TlsFiles(Path("c"), Path("k"), None)
    with pytest.raises(SystemExit, match="go together"):
        TlsFiles.given("c", "", "ca", "flags")
    with pytest.raises(SystemExit, match="needs --tls-cert-file"):
        check_listener("0.0.0.0", TlsFiles.given("", "", "ca", "flags"), False)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--grpc-host", "0.0.0.0"], "--tls-cert-file"),
        (["--grpc-host", "0.0.0.0", "--grpc-plaintext"], "QOS_ENVOY_TOKEN"),
        (["--grpc-host", "0.0.0.0", "--processes", "2"], "--tls-cert-file"),
    ],
)
def test_serve_refuses_an_open_port_at_once_saying_what_it_needs(tmp_path, flags, said):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("QOS_", "OTEL_"))}
    result = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--state-dir", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
    )
    assert result.returncode != 0 and said in result.stderr, result.stderr
