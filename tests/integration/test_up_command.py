"""`qos-sidecar up` as a user runs it: one command, a demo answer, a clean Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    """Running: not gone, and not a zombie its new parent has yet to reap."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


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


def up_argv(tmp_path, listen: int) -> list[str]:
    return [
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


def output_until_up(up: subprocess.Popen) -> str:
    lines = []
    for line in up.stdout:
        lines.append(line)
        if "Ctrl-C stops everything" in line or "did not start" in line:
            break
    return "".join(lines)


def start_up(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    """`up` running, its output (stdout and stderr) read as text."""
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )


def stop_up(up: subprocess.Popen) -> str:
    """SIGTERM, as a user's Ctrl-C: what `up` says until it has stopped."""
    up.send_signal(signal.SIGTERM)
    rest, _ = up.communicate(timeout=60)
    return rest


def end_up(up: subprocess.Popen) -> None:
    """Whatever a test left running of `up` killed, its output closed."""
    if up.poll() is None:
        up.kill()
        up.wait()
    if up.stdout is not None:
        up.stdout.close()


def up_environment(tmp_path) -> dict[str, str]:
    """The user's environment, with its state in the test's folder: `up` uses the default
    state directory, $XDG_STATE_HOME/qos-sidecar."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "QOS_STATE_DIR")}
    return {**env, "XDG_STATE_HOME": str(tmp_path / "xdg")}


def test_up_serves_a_demo_request_and_stops_everything_it_started(tmp_path):
    listen = free_port()
    argv = up_argv(tmp_path, listen)
    up = start_up(argv, up_environment(tmp_path))
    try:
        output = output_until_up(up)
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

        rest = stop_up(up)
    finally:
        end_up(up)
    assert up.returncode == 0, rest
    assert "stopped" in rest
    assert [p for p in pids if alive(p)] == []
    # What it held is kept where `up` starts from next time, and the mode for Envoy.
    state = tmp_path / "xdg" / "qos-sidecar"
    assert len(list(state.glob("config-*.json"))) == 1
    assert (state / "envoy-runtime" / "qos" / "core_only").read_text() == "0"


@pytest.mark.timeout(120)
def test_up_killed_outright_leaves_nothing_running(tmp_path):
    up = start_up(up_argv(tmp_path, free_port()), up_environment(tmp_path))
    try:
        output = output_until_up(up)
        pids = [int(p) for p in re.findall(r"pid (\d+)", output)]
        assert len(pids) == 7 and all(alive(p) for p in pids), output
        up.kill()  # SIGKILL: no chance to stop anything itself
        up.wait(10)
        deadline = time.monotonic() + 15
        while any(alive(p) for p in pids):
            assert time.monotonic() < deadline, [p for p in pids if alive(p)]
            time.sleep(0.1)
    finally:
        end_up(up)


def command_lines() -> str:
    """Every process's command line on this machine, as any local user reads them."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    found.append(cmdline.read().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:  # gone meanwhile
                continue
    return "\n".join(found)


def test_up_puts_no_password_or_token_on_a_command_line_or_in_its_output(tmp_path):
    password = "s3cret-" + os.urandom(6).hex()
    port = free_port()
    config = tmp_path / "redis.conf"  # the password in a file: not on redis-server's line
    config.write_text(f"port {port}\nbind 127.0.0.1\nsave ''\nrequirepass {password}\n")
    redis = ManagedProcess(
        "redis-pw", [shutil.which("redis-server"), str(config)], tmp_path / "r.log"
    )
    redis.start_ready(lambda: readiness.redis_ping(f"redis://:{password}@127.0.0.1:{port}/0"))
    env = {**up_environment(tmp_path), "REDIS_URL": f"redis://:{password}@127.0.0.1:{port}/0"}
    up = start_up(up_argv(tmp_path, free_port()), env)
    try:
        output = output_until_up(up)
        assert "finish_reason=length" in output, output  # it works through that Redis
        token_file = tmp_path / "admin-token"
        token = token_file.read_text().strip()
        assert len(token) >= 20 and oct(token_file.stat().st_mode & 0o777) == "0o600"
        lines = command_lines()
        assert password not in output and token not in output
        assert password not in lines and token not in lines
        assert ":***@" in output  # the Redis row, masked
        rest = stop_up(up)
        assert password not in rest and token not in rest
    finally:
        end_up(up)
        redis.stop()
