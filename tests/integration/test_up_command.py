"""`qos-sidecar up` as a user runs it: one command, a demo answer, a clean Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from sidecar.stack.ports import free_port

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def free_port_pair() -> int:
    """A free port whose successor is free too: `up` puts replicas on consecutive ports."""
    for _ in range(50):
        base = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
        return base
    raise AssertionError("no two consecutive free ports")


def test_up_serves_a_demo_request_and_stops_everything_it_started(tmp_path):
    listen = free_port()
    argv = [
        sys.executable,
        "-m",
        "sidecar",
        "up",
        "--demo",
        "--time-scale",
        "0.05",
        "--listen-port",
        str(listen),
        "--envoy-admin-port",
        str(free_port()),
        "--grpc-port",
        str(free_port()),
        "--admin-port",
        str(free_port()),
        "--redis-port",
        str(free_port()),
        "--replicas",
        "2",
        "--mock-base-port",
        str(free_port_pair()),
        "--log-dir",
        str(tmp_path),
    ]
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    up = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines = []
    try:
        for line in up.stdout:
            lines.append(line)
            if "Ctrl-C stops everything" in line or "did not start" in line:
                break
        output = "".join(lines)
        assert "qos-sidecar stack is up" in output, output
        assert "finish_reason=length" in output  # the demo's answer
        pids = [int(p) for p in re.findall(r"pid (\d+)", output)]
        assert len(pids) == 7 and all(alive(p) for p in pids)

        request = urllib.request.Request(
            f"http://127.0.0.1:{listen}/v1/chat/completions",
            data=json.dumps(
                {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.load(response)["usage"]["completion_tokens"] == 3

        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert up.returncode == 0, rest
    assert "stopped" in rest
    assert [p for p in pids if alive(p)] == []
