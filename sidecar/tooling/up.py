"""`qos-sidecar up`: the local stack in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import tempfile
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sidecar import redis_connect
from sidecar.options import setting
from sidecar.tooling.engine import vllm
from sidecar.tooling.stack.processes import ManagedProcess, StackError, reaped_by
from sidecar.tooling.stack.reaper import Reaper
from sidecar.tooling.stack.stack import RunningEngines, Stack, StackOptions

DEMO_REQUEST = {
    "model": "mock-llm",
    "messages": [{"role": "user", "content": "Where is my order?"}],
    "max_tokens": 16,
}


@dataclass(frozen=True)
class Settings:
    listen_host: str = setting("127.0.0.1", "QOS_LISTEN_HOST", "address Envoy listens on")
    listen_port: int = setting(8080, "QOS_LISTEN_PORT", "Envoy's port for clients")
    envoy_admin_port: int = setting(9901, None, "Envoy admin port (on 127.0.0.1)")
    grpc_port: int = setting(50051, None, "sidecar gRPC port")
    admin_port: int = setting(9090, None, "sidecar admin HTTP port")
    redis_url: str = setting("", "REDIS_URL", "use this Redis instead of starting one")
    redis_port: int = setting(6379, None, "port of the redis-server started when no REDIS_URL")
    redis_cluster: bool = setting(
        False,
        "QOS_REDIS_CLUSTER",
        "a Redis Cluster: REDIS_URL names one of its nodes, or three masters are started",
    )
    engine: str = setting(
        "mock",
        None,
        "mock: mock vLLM replicas; vllm: vLLM's CPU build serving a tiny model made here "
        "(scripts/setup-engine.sh installs it)",
    )
    replicas: int = setting(
        0, None, "model-server replicas (per pool, with --pools); 0: 2 mocks or 1 vLLM"
    )
    pools: int = setting(
        0, None, "model pools pool-a, pool-b, ... of --replicas mocks each serving model-a, ..."
    )
    mock_base_port: int = setting(8001, None, "port of the first mock vLLM replica")
    time_scale: float = setting(1.0, None, "mock vLLM time scale (0.1 = ten times faster)")
    log_dir: str = setting("", None, "where component logs go (default: a new temp folder)")
    state_dir: str = setting(
        "",
        "QOS_STATE_DIR",
        "the sidecar's state directory, shared with Envoy: the last known good "
        "configuration and the mode (default: $XDG_STATE_HOME/qos-sidecar, or "
        "~/.local/state/qos-sidecar)",
    )
    demo: bool = setting(False, None, "send one chat completion through Envoy once up")
    tls: bool = setting(
        False,
        None,
        "mutual TLS on the sidecar's gRPC port: a throwaway CA made in the log folder, "
        "whose client certificate Envoy and the reporters present",
    )


def main(settings: Settings) -> int:
    if settings.engine not in ("mock", "vllm"):
        print(f"--engine is mock or vllm, not {settings.engine!r}", file=sys.stderr)
        return 2
    if settings.engine == "vllm" and settings.pools:
        print("--pools are made of mocks: use them without --engine vllm", file=sys.stderr)
        return 2
    work_dir = Path(settings.log_dir or tempfile.mkdtemp(prefix="qos-stack-"))
    # Should `up` be killed outright, the reaper ends what it started.
    reaper = Reaper()
    reaped_by(reaper)
    try:
        return _up(settings, work_dir)
    finally:
        reaped_by(None)
        reaper.done()


def _up(settings: Settings, work_dir: Path) -> int:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with contextlib.ExitStack() as started:
        engines: list[ManagedProcess] = []
        try:
            running = _start_engines(settings, work_dir, started, engines)
        except StackError as error:
            print(f"the engine did not start: {error}", file=sys.stderr)
            return 1
        return _run(settings, work_dir, running, engines, stop)


def _start_engines(
    settings: Settings,
    work_dir: Path,
    started: contextlib.ExitStack,
    processes: list[ManagedProcess],
) -> RunningEngines | None:
    """With --engine vllm, the engines on the mocks' ports, ready (stopped on exit)."""
    if settings.engine != "vllm":
        return None
    engine_settings = vllm.EngineSettings()
    urls = []
    for index in range(settings.replicas or 1):
        port = settings.mock_base_port + index
        print(f"starting vLLM on port {port} (model: {vllm.model()}) ...", flush=True)
        url, process = started.enter_context(
            vllm.serving(engine_settings, work_dir, port, name=f"vllm-{index + 1}")
        )
        urls.append(url)
        processes.append(process)
    return RunningEngines(tuple(urls), engine_settings.scheduling_policy)


def _run(
    settings: Settings,
    work_dir: Path,
    engines: RunningEngines | None,
    engine_processes: list[ManagedProcess],
    stop: threading.Event,
) -> int:
    replicas = settings.replicas or (len(engines.urls) if engines else 2)
    options = StackOptions(
        work_dir=work_dir,
        listen_host=settings.listen_host,
        listen_port=settings.listen_port,
        envoy_admin_port=settings.envoy_admin_port,
        grpc_port=settings.grpc_port,
        admin_port=settings.admin_port,
        redis_url=settings.redis_url,
        redis_port=settings.redis_port,
        redis_cluster=settings.redis_cluster,
        replicas=replicas,
        pools=settings.pools,
        mock_ports=tuple(
            settings.mock_base_port + i for i in range(replicas * max(1, settings.pools))
        ),
        time_scale=settings.time_scale,
        engines=engines,
        state_dir=Path(settings.state_dir) if settings.state_dir else None,
        tls=settings.tls,
    )
    stack = Stack(options)
    try:
        print(f"starting the local stack (logs in {work_dir}) ...", flush=True)
        stack.start()
        _print_endpoints(stack, engine_processes)
        if settings.demo:
            _demo(stack)
        print("Ctrl-C stops everything.", flush=True)
        while not stop.wait(0.5):
            dead = [p.name for p in stack.processes + engine_processes if not p.running()]
            if dead:
                print(f"{', '.join(dead)} exited; stopping the stack", file=sys.stderr)
                return 1
        return 0
    except StackError as error:
        print(f"the stack did not start: {error}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
        print("stopped", flush=True)


def _print_endpoints(stack: Stack, engine_processes: list[ManagedProcess]) -> None:
    rows = [
        ("Envoy (clients)", stack.envoy_url, "envoy"),
        ("Envoy admin", stack.envoy_admin_url, None),
        ("sidecar gRPC", stack.sidecar_grpc, "sidecar"),
        ("sidecar admin", stack.sidecar_admin_url, None),
        ("ops dashboard", f"{stack.sidecar_admin_url}/dashboard", None),
        ("  its token", f"in {_token_file(stack)}", None),
        (
            "Redis Cluster" if stack.options.redis_cluster else "Redis",
            redis_connect.redacted(stack.redis_url),
            stack.redis_process_name,
        ),
    ]
    engines = stack.options.engines
    for i, url in enumerate(stack.engine_urls, start=1):
        models = ",".join(stack.options.served_models(i - 1))
        if engines:
            engine_pid = engine_processes[i - 1].pid
            rows.append((f"vLLM {i}", f"{url} ({models})  pid {engine_pid}", None))
        else:
            rows.append((f"mock vLLM {i}", f"{url} ({models})", f"mock-vllm-{i}"))
        rows.append(("  its reporter", f"-> {stack.sidecar_grpc}", f"reporter-{i}"))
    print("qos-sidecar stack is up:")
    for label, where, process in rows:
        pid = f"pid {stack.process(process).pid}" if process else ""
        print(f"  {label:<16} {where:<32} {pid}".rstrip())
    print(
        f"Try: curl {stack.envoy_url}/v1/chat/completions -H 'Content-Type: application/json' "
        f"-d '{json.dumps(DEMO_REQUEST)}'",
        flush=True,
    )


def _token_file(stack: Stack) -> Path:
    """The dashboard's token, in a file only this user reads: never printed."""
    path = stack.options.work_dir / "admin-token"
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(stack.admin_token + "\n")
    return path


def _demo(stack: Stack) -> None:
    request = urllib.request.Request(
        f"{stack.envoy_url}/v1/chat/completions",
        data=json.dumps(DEMO_REQUEST).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.load(response)
    choice = answer["choices"][0]
    print("demo: POST /v1/chat/completions through Envoy and the sidecar answered:")
    print(f"  {choice['message']['content'].strip()!r}")
    print(
        f"  finish_reason={choice['finish_reason']} usage={json.dumps(answer['usage'])}", flush=True
    )
