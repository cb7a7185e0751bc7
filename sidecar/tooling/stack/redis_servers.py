"""Real redis-server processes on loopback: one server, or a Redis Cluster of several."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import redis

from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess, StackError


def start_redis_server(work_dir: Path, port: int, *extra: str) -> ManagedProcess:
    """A redis-server on 127.0.0.1:`port`, persistence off, ready when it returns."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise StackError(
            "redis-server not found: install it (apt-get install redis-server) "
            "or point REDIS_URL at a running Redis"
        )
    server = ManagedProcess(
        f"redis-{port}",
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(work_dir),
            *extra,
        ],
        work_dir / f"redis-{port}.log",
    )
    server.start_ready(lambda: readiness.redis_ping(f"redis://127.0.0.1:{port}/0"))
    return server


def redis_on_free_port(work_dir: Path) -> tuple[ManagedProcess, str]:
    """A redis-server on a free loopback port, and its URL (database 0)."""
    port = free_port()
    return start_redis_server(work_dir, port), f"redis://127.0.0.1:{port}/0"


def start_redis_cluster(work_dir: Path, ports: Sequence[int]) -> list[ManagedProcess]:
    """One master per port, all 16384 slots assigned, ready when it returns."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise StackError("redis-cli not found: install it (apt-get install redis-server)")
    nodes: list[ManagedProcess] = []
    try:
        for port in ports:
            nodes.append(start_cluster_node(work_dir, port))
        addresses = [f"127.0.0.1:{port}" for port in ports]
        created = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if created.returncode != 0:
            output = created.stdout + created.stderr
            raise StackError(f"redis-cli --cluster create failed:\n{output}")
        nodes[0].wait_ready(lambda: all(cluster_ok(port, len(ports)) for port in ports))
    except BaseException:
        for node in reversed(nodes):
            node.stop()
        raise
    return nodes


def start_cluster_node(work_dir: Path, port: int) -> ManagedProcess:
    """A cluster-enabled redis-server; started again, it rejoins with the identity (and
    cluster bus port) its nodes.conf remembers."""
    node_dir = work_dir / f"cluster-{port}"
    node_dir.mkdir(parents=True, exist_ok=True)
    nodes_conf = node_dir / "nodes.conf"
    # The bus port defaults to port + 10000, which does not exist for a high free port.
    bus_port = _remembered_bus_port(nodes_conf) or free_port()
    return start_redis_server(
        node_dir,
        port,
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        str(nodes_conf),
        "--cluster-node-timeout",
        "2000",
        "--cluster-port",
        str(bus_port),
    )


def _remembered_bus_port(nodes_conf: Path) -> int | None:
    """The node's own `ip:port@busport` from the `myself` line of its nodes.conf."""
    if not nodes_conf.exists():
        return None
    for line in nodes_conf.read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and "myself" in fields[2].split(","):
            return int(fields[1].split("@")[1].split(",")[0])
    return None


def cluster_ok(port: int, masters: int) -> bool:
    """This node sees every slot served and every master known."""
    client = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
    try:
        info = client.cluster("INFO")
    except redis.RedisError:
        return False
    finally:
        client.close()
    return info.get("cluster_state") == "ok" and int(info.get("cluster_known_nodes", 0)) >= masters
