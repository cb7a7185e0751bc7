"""The Redis the Kubernetes manifests ship, run as its pod runs it (its start command and
its redis.conf, from `kubectl kustomize`, on a real redis-server): it wants the password
from its Secret, shows it in no process list, and a Redis killed (SIGKILL, as the OOM
killer or a node's kubelet would) comes back from its volume with every change it had
written: the configuration, the mode, every tenant and the record of changes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from sidecar.config.audit import Actor
from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode, OperatorMode, Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.ports import free_port
from sidecar.tooling.stack.processes import ManagedProcess
from tests.integration.helpers import built, named, wait_until

pytestmark = pytest.mark.integration

PASSWORD = "a-password-from-the-secret"
TENANTS = 200


class Pod:
    """The Redis container's start command and configuration, run here: its paths moved
    into a folder of the test's, on a free loopback port."""

    def __init__(self, documents: list[dict], root: Path) -> None:
        redis_set = named(documents, "StatefulSet", "redis")
        (container,) = redis_set["spec"]["template"]["spec"]["containers"]
        self.stateful_set = redis_set
        conf = named(documents, "ConfigMap", "redis-config")["data"]["redis.conf"]
        self.port = free_port()
        for folder in ("data", "run", "etc"):
            (root / folder).mkdir()
        moved = {"/data": root / "data", "/run/redis": root / "run", "/etc/redis": root / "etc"}
        for path, here in moved.items():
            conf = conf.replace(path, str(here))
        conf = conf.replace("port 6379", f"port {self.port}") + "bind 127.0.0.1\n"
        (root / "etc" / "redis.conf").write_text(conf)
        command = container["command"]
        assert command[:2] == ["sh", "-c"]
        script = command[2]
        for path, here in moved.items():
            script = script.replace(path, str(here))
        self.argv = ["sh", "-c", script]
        self.root = root
        self.process: ManagedProcess | None = None

    def start(self) -> float:
        """Seconds until it answers, its data loaded."""
        self.process = ManagedProcess(
            "redis", self.argv, self.root / "redis.log", env={"REDIS_PASSWORD": PASSWORD}
        )
        started = time.monotonic()
        self.process.start_ready(self._loaded)
        return time.monotonic() - started

    def _persistence(self) -> dict | None:
        """Its INFO persistence; None while it does not answer."""
        client = redis.Redis(port=self.port, password=PASSWORD)
        try:
            return client.info("persistence")
        except redis.RedisError:
            return None
        finally:
            client.close()

    def _loaded(self) -> bool:
        info = self._persistence()
        return info is not None and info["loading"] == 0

    def written(self) -> bool:
        """Whether every write it answered is in its append-only file (the OS holds it,
        whether or not it reached the disk yet)."""
        info = self._persistence()
        return info is not None and info["aof_buffer_length"] == 0

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)


@pytest.fixture
def pod(tmp_path):
    running = Pod(built(), tmp_path)
    yield running
    if running.process is not None:
        running.process.stop()


def test_the_shipped_redis_asks_its_secret_and_keeps_it_off_the_process_list(pod):
    spec = pod.stateful_set["spec"]
    claims = spec["volumeClaimTemplates"]
    assert [claim["metadata"]["name"] for claim in claims] == ["data"]
    (container,) = spec["template"]["spec"]["containers"]
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    pod.start()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=pod.port).ping()
    assert redis.Redis(port=pod.port, password=PASSWORD).ping()
    assert pod.process is not None
    command_line = Path(f"/proc/{pod.process.pid}/cmdline").read_bytes()
    assert command_line.startswith(b"redis-server") and PASSWORD.encode() not in command_line
    auth_file = pod.root / "run" / "auth.conf"
    assert oct(auth_file.stat().st_mode & 0o777) == "0o600"


def test_the_sidecars_take_the_password_from_the_same_secret():
    gateway = named(built(), "Deployment", "qos-gateway")
    containers = gateway["spec"]["template"]["spec"]["containers"]
    (sidecar,) = [c for c in containers if c["name"] == "sidecar"]
    env = [item["name"] for item in sidecar["env"]]
    # A variable is expanded in another only when it is defined before it.
    assert env.index("REDIS_PASSWORD") < env.index("REDIS_URL")
    (password,) = [item for item in sidecar["env"] if item["name"] == "REDIS_PASSWORD"]
    assert password["valueFrom"]["secretKeyRef"] == {"name": "redis-auth", "key": "password"}
    (url,) = [item for item in sidecar["env"] if item["name"] == "REDIS_URL"]
    assert url["value"] == "redis://:$(REDIS_PASSWORD)@redis:6379/0"
    assert not any("REDIS" in arg for arg in sidecar["args"])


@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_a_killed_redis_comes_back_with_every_change_it_answered(pod):
    pod.start()
    client = aioredis.Redis(port=pod.port, password=PASSWORD)
    store = ConfigStore(client)
    duty = Actor("duty", "cli")
    await store.save_config(QosConfig.from_partial({"fleet": {"max_concurrency": 9}}))
    for number in range(TENANTS):
        await store.put_tenant(f"t{number}", Tenant(tier=Tier.P1), f"k-{number}", actor=duty)
    await store.save_mode(OperatorMode(mode=Mode.CORE_ONLY), actor=duty)
    held = await store.load()
    # Written to the file (a killed process loses nothing of it): at once on a disk that
    # keeps up; while a flush to disk is still running Redis holds writes back up to 2 s.
    await wait_until(pod.written, what="Redis writing its append-only file")
    await client.aclose()
    pod.kill()  # at once: the last change was answered a moment ago

    took = pod.start()
    client = aioredis.Redis(port=pod.port, password=PASSWORD)
    back = await ConfigStore(client).load()
    await client.aclose()
    assert (back.version, back.store_id) == (held.version, held.store_id)
    assert back.mode.mode is Mode.CORE_ONLY and back.config.fleet.max_concurrency == 9
    assert back.tenants == held.tenants and len(back.tenants) == TENANTS
    assert back.api_keys == held.api_keys and back.audit == held.audit
    size = sum(f.stat().st_size for f in (pod.root / "data").rglob("*") if f.is_file())
    print(f"back with {TENANTS} tenants in {took * 1000:.0f} ms; append-only file {size} bytes")
