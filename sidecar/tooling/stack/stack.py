"""The whole local stack as one object: Redis, mock vLLM replicas (or model servers it
did not start, such as a real vLLM), the sidecar, Envoy.

`qos-sidecar up` runs it with the well-known ports; the tests run it on free ports. Each
component is started, waited for until it serves, and stopped by its PID, last started
first stopped, even when a later one fails to start.
"""

from __future__ import annotations

import copy
import secrets
import sys
import urllib.parse
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidecar import envoy_auth, redis_connect
from sidecar.config.schema import OverloadConfig
from sidecar.config.state_dir import StateDir
from sidecar.grpc_tls import TlsFiles
from sidecar.ports import free_port
from sidecar.tooling.stack import envoy_config, readiness
from sidecar.tooling.stack.admin_client import StackConfig
from sidecar.tooling.stack.processes import ManagedProcess, StackError
from sidecar.tooling.stack.redis_servers import start_redis_cluster, start_redis_server

if TYPE_CHECKING:
    from sidecar.tooling.stack.certificates import LocalPki

# The sidecar reads its admin token here (settings.py), so it is on no command line.
ADMIN_TOKEN_ENV = "QOS_ADMIN_TOKEN"
REPORT_TOKEN_ENV = "QOS_REPORT_TOKEN"
# Envoy's token, in its environment and the sidecar's (envoy_auth.py).
ENVOY_TOKEN_ENV = "QOS_ENVOY_TOKEN"
# A pod's report is kept for this many report intervals: a late report or two (a busy
# model server answers /metrics slowly) must not make its load unknown.
REPORTS_KEPT = 5


@dataclass(frozen=True)
class RunningEngines:
    """Model servers already serving (a real vLLM): the stack fronts them, not mocks."""

    urls: tuple[str, ...]
    scheduling_policy: str = "fcfs"  # what they run, as their reporters pass it on


@dataclass(frozen=True)
class StackOptions:
    work_dir: Path
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    envoy_admin_port: int = 9901
    grpc_port: int = 50051
    admin_port: int = 9090
    redis_url: str = ""  # empty: start a local redis-server on redis_port
    redis_port: int = 6379
    # A Redis Cluster: the sidecar follows its slots; with no redis_url the stack starts
    # three masters (on redis_port and two free ports).
    redis_cluster: bool = False
    replicas: int = 2
    mock_ports: tuple[int, ...] = ()  # default: 8001, 8002, …
    time_scale: float = 1.0
    seed: int = 0
    mock_args: tuple[str, ...] = ()
    sidecar_args: tuple[str, ...] = ()
    # More of the sidecar's environment (OTEL_* for its traces, say).
    sidecar_env: tuple[tuple[str, str], ...] = ()
    envoy_config: Path = envoy_config.LOCAL_CONFIG
    envoy_concurrency: int = 0  # 0: Envoy's default, a worker per core
    report_interval: float = 0.1
    admin_token: str = ""  # the dashboard's; empty: the stack makes one
    # Model pools: 0 is one fleet with no pools configured; N is N pools (pool-a, pool-b,
    # ...) of `replicas` mock GPUs each, serving model-a, model-b, ... (the first pool also
    # mock-llm, the demo's model), each with an Envoy cluster of its own.
    pools: int = 0
    # What each reporter says its pod prefills (tokens a second); 0: not said.
    report_capacity: float = 0.0
    engines: RunningEngines | None = None  # None: the stack starts `replicas` mocks
    # How the sidecar learns the pods' load: "push", a reporter beside each; "scrape",
    # the sidecar reads their /metrics itself every report_interval.
    load_source: str = "push"
    # The sidecar's state directory, shared with Envoy (None: the sidecar's default).
    state_dir: Path | None = None
    # Mutual TLS on the sidecar's gRPC port, with a throwaway CA made in work_dir: Envoy
    # and the reporters present its client certificate.
    tls: bool = False
    # With tls: a DNS name the client certificate carries, which the sidecar takes for
    # its Envoy's, as it does the token (QOS_ENVOY_CLIENT_NAME): a Gateway's proxies.
    tls_client_name: str = ""

    @classmethod
    def on_free_ports(cls, work_dir: Path, **overrides: object) -> StackOptions:
        replicas = int(overrides.get("replicas", cls.replicas))  # type: ignore[call-overload]
        replicas *= max(1, int(overrides.get("pools", cls.pools)))  # type: ignore[call-overload]
        ports = dict(
            listen_port=free_port(),
            envoy_admin_port=free_port(),
            grpc_port=free_port(),
            admin_port=free_port(),
            redis_port=free_port(),
            mock_ports=tuple(free_port() for _ in range(replicas)),
            state_dir=work_dir / "state",  # a test's own, never the user's
        )
        return cls(work_dir=work_dir, **{**ports, **overrides})  # type: ignore[arg-type]

    @property
    def scheduling_policy(self) -> str:
        """The policy the pods run (their reporters pass it on, as a pod's would)."""
        if self.engines is not None:
            return self.engines.scheduling_policy
        args = list(self.mock_args)
        for index, arg in enumerate(args):
            if arg == "--scheduling-policy" and index + 1 < len(args):
                return args[index + 1]
            if arg.startswith("--scheduling-policy="):
                return arg.split("=", 1)[1]
        return "fcfs"  # the mock's default, as vLLM's

    @property
    def engine_urls(self) -> tuple[str, ...]:
        """The model servers behind Envoy: the mocks', or the running engines'."""
        if self.engines is not None:
            return self.engines.urls
        return tuple(f"http://127.0.0.1:{port}" for port in self.replica_ports)

    @property
    def replica_ports(self) -> tuple[int, ...]:
        count = self.replicas * max(1, self.pools)
        return self.mock_ports or tuple(8001 + i for i in range(count))

    @property
    def pool_names(self) -> tuple[str, ...]:
        return tuple(f"pool-{chr(ord('a') + i)}" for i in range(self.pools))

    def replica_pool(self, index: int) -> str | None:
        """The pool of the replica at `index` (0-based); None without pools."""
        return self.pool_names[index // self.replicas] if self.pools else None

    def served_models(self, index: int) -> tuple[str, ...]:
        """The model names the replica at `index` serves (the first pool's also answer to
        mock-llm, the demo's model)."""
        pool = self.replica_pool(index)
        if pool is None:
            return ("mock-llm",)
        model = "model-" + pool.removeprefix("pool-")
        return (model, "mock-llm") if pool == self.pool_names[0] else (model,)

    def pools_config(self) -> dict[str, Any]:
        """The QoS configuration's pools for this stack ({} without pools)."""
        pools = {
            self.replica_pool(index): {"models": list(self.served_models(index))}
            for index in range(0, len(self.replica_ports), self.replicas)
        }
        return {"pools": pools} if self.pools else {}

    def base_config(self) -> dict[str, Any]:
        """What every configuration of this stack keeps unless it names it: its pools, and
        pod reports kept for a few report intervals when the default TTL is shorter."""
        base = self.pools_config()
        ttl = self.report_interval * REPORTS_KEPT
        if ttl > OverloadConfig().report_ttl_seconds:
            base["overload"] = {"report_ttl_seconds": ttl}
        return base


@dataclass
class Stack:
    options: StackOptions
    processes: list[ManagedProcess] = field(default_factory=list)
    admin_token: str = ""
    report_token: str = ""  # what its sidecars ask of the reporters' reports
    envoy_token: str = ""  # what its sidecars ask of its Envoy's streams

    def __post_init__(self) -> None:
        self.admin_token = self.options.admin_token or secrets.token_urlsafe(24)
        self.report_token = secrets.token_urlsafe(24)
        self.envoy_token = secrets.token_urlsafe(24)
        self.pki: LocalPki | None = None

    @property
    def client_tls(self) -> TlsFiles | None:
        """What a client of the sidecar's gRPC port presents (None: plaintext)."""
        return self.pki.client if self.pki is not None else None

    @property
    def dashboard_url(self) -> str:
        return f"{self.sidecar_admin_url}/dashboard?token={self.admin_token}"

    @property
    def envoy_url(self) -> str:
        host = "127.0.0.1" if self.options.listen_host == "0.0.0.0" else self.options.listen_host
        return f"http://{host}:{self.options.listen_port}"

    @property
    def envoy_admin_url(self) -> str:
        return f"http://127.0.0.1:{self.options.envoy_admin_port}"

    @property
    def sidecar_grpc(self) -> str:
        return f"127.0.0.1:{self.options.grpc_port}"

    @property
    def sidecar_admin_url(self) -> str:
        return f"http://127.0.0.1:{self.options.admin_port}"

    @property
    def redis_url(self) -> str:
        return self.options.redis_url or f"redis://127.0.0.1:{self.options.redis_port}/0"

    @property
    def config(self) -> StackConfig:
        """Changes this stack's configuration, waiting until its sidecar has it; a change
        keeps the stack's pools unless it names pools itself."""
        return StackConfig(
            self.redis_url,
            self.sidecar_admin_url,
            self.options.redis_cluster,
            base=self.options.base_config(),
        )

    @property
    def state(self) -> StateDir:
        return StateDir.resolve(str(self.options.state_dir or ""))

    @property
    def redis_process_name(self) -> str | None:
        return None if self.options.redis_url else f"redis-{self.options.redis_port}"

    @property
    def engine_urls(self) -> tuple[str, ...]:
        return self.options.engine_urls

    def process(self, name: str) -> ManagedProcess:
        for process in self.processes:
            if process.name == name:
                return process
        raise KeyError(name)

    def start(self) -> Stack:
        self.options.work_dir.mkdir(parents=True, exist_ok=True)
        if self.options.engines is not None and self.options.pools:
            raise StackError("pools are made of mocks: give no running engines with them")
        try:
            if self.options.tls:
                self.pki = _local_pki(self.options.work_dir / "pki", self.options.tls_client_name)
            self._start_redis()
            if self.options.base_config():
                # The pools and the reports' TTL, there before the sidecar reads any report.
                self.config.set({}, wait=False)
            self._start_mocks()
            self._start_sidecar()
            self._start_reporters()
            self._start_envoy()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        while self.processes:
            self.processes.pop().stop()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _launch(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> ManagedProcess:
        process = ManagedProcess(name, argv, self.options.work_dir / f"{name}.log", env)
        process.start()
        self.processes.append(process)
        return process

    def _start_redis(self) -> None:
        if self.options.redis_url:
            if not readiness.redis_ping(self.options.redis_url):
                where = redis_connect.redacted(self.options.redis_url)
                raise StackError(f"REDIS_URL={where} does not answer PING")
            return
        if self.options.redis_cluster:
            ports = (self.options.redis_port, free_port(), free_port())
            self.processes += start_redis_cluster(self.options.work_dir, ports)
        else:
            self.processes.append(
                start_redis_server(self.options.work_dir, self.options.redis_port)
            )

    def _start_mocks(self) -> None:
        if self.options.engines is not None:
            return  # already serving
        started = []
        for index, (port, url) in enumerate(
            zip(self.options.replica_ports, self.engine_urls, strict=True), start=1
        ):
            process = self._launch(
                f"mock-vllm-{index}",
                mock_vllm_argv(
                    port,
                    "--time-scale",
                    str(self.options.time_scale),
                    "--seed",
                    str(self.options.seed + index),
                    "--model",
                    ",".join(self.options.served_models(index - 1)),
                    *self.options.mock_args,
                ),
            )
            started.append((process, url))
        for process, url in started:  # they start in parallel, then each is awaited
            process.wait_ready(partial(readiness.http_ok, f"{url}/health"))

    def _start_sidecar(self, name: str = "sidecar") -> None:
        self.processes.append(
            start_sidecar(
                self.options.work_dir,
                self.redis_url,
                *(["--redis-cluster"] if self.options.redis_cluster else []),
                *self._scrape_args(),
                *self.options.sidecar_args,
                grpc_port=self.options.grpc_port,
                admin_port=self.options.admin_port,
                name=name,
                state_dir=self.state.path,
                tls=self.pki,
                env={
                    **dict(self.options.sidecar_env),
                    **self._client_name_env,
                    ADMIN_TOKEN_ENV: self.admin_token,
                    REPORT_TOKEN_ENV: self.report_token,
                    ENVOY_TOKEN_ENV: self.envoy_token,
                },
            ).process
        )

    @property
    def _client_name_env(self) -> dict[str, str]:
        name = self.options.tls_client_name
        return {envoy_auth.CLIENT_NAME_ENV: name} if name else {}

    def _scrape_args(self) -> list[str]:
        if self.options.load_source == "push":
            return []
        if self.options.load_source != "scrape":
            raise StackError(f"load_source is push or scrape, not {self.options.load_source}")
        interval = self.options.report_interval
        targets = ",".join(urllib.parse.urlsplit(url).netloc for url in self.engine_urls)
        return [
            "--scrape-targets",
            targets,
            "--scrape-interval",
            str(interval),
            "--scrape-timeout",
            str(max(0.15, 0.8 * interval)),
            # Renewed every interval: held for a few of them (the reports' TTL must be
            # longer still, as the sidecar's help says).
            "--scrape-lease-seconds",
            str(max(0.8, 2.5 * interval)),
        ]

    def restart_sidecar(self) -> None:
        """Start the sidecar again on its ports (after a test killed it)."""
        self._start_sidecar(name=f"sidecar-{len(self.processes)}")

    def _start_reporters(self) -> None:
        """A `qos-sidecar report` beside each pod, as beside each vLLM pod (none when the
        sidecar scrapes them)."""
        if self.options.load_source == "push":
            for index, url in enumerate(self.engine_urls, start=1):
                self._launch(
                    f"reporter-{index}", self._reporter_argv(index, url), self.reporter_env
                )
        # Ready when the sidecar sees every pod: until then P2 would be shed as unknown load.
        self.process("sidecar").wait_ready(
            lambda: readiness.pods_reporting(self.sidecar_admin_url) >= len(self.engine_urls)
        )

    @property
    def envoy_env(self) -> dict[str, str]:
        """What an Envoy in front of this stack's sidecar needs in its environment."""
        return {ENVOY_TOKEN_ENV: self.envoy_token}

    @property
    def reporter_env(self) -> dict[str, str]:
        """What a reporter of this stack's pods needs in its environment: the token."""
        return {REPORT_TOKEN_ENV: self.report_token}

    def _reporter_argv(self, index: int, url: str) -> list[str]:
        return [*self._reporter_command(index, url), *tls_client_args(self.client_tls)]

    def _reporter_command(self, index: int, url: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "sidecar",
            "report",
            "--vllm-url",
            url,
            "--sidecar",
            self.sidecar_grpc,
            "--pod-id",
            self.pod_name(index),
            "--interval",
            str(self.options.report_interval),
            "--scheduling-policy",
            self.options.scheduling_policy,
            "--capacity-tokens-per-second",
            str(self.options.report_capacity),
        ]

    def pod_name(self, index: int) -> str:
        """The pod at `index` (1-based), as its reporter names it."""
        return f"{'vllm' if self.options.engines else 'mock-vllm'}-{index}"

    def envoy_config(self, listen_port: int, admin_port: int) -> dict[str, Any]:
        """The stack's Envoy config, listening on `listen_port`, in front of its sidecar and
        mock GPUs (a test may start a second Envoy from it)."""
        return envoy_config.adapt(
            envoy_config.load(self.options.envoy_config),
            listen=(self.options.listen_host, listen_port),
            admin_port=admin_port,
            sidecar=("127.0.0.1", self.options.grpc_port),
            upstreams=self._default_upstreams(),
            pools=self._pool_upstreams(),
            state_dir=self.state.path,
            sidecar_tls=self.client_tls,
        )

    def _default_upstreams(self) -> list[tuple[str, int]]:
        """The default cluster's pods: all, or with pools the first pool's mocks (what
        Envoy sends on without the sidecar, and requests of no pool such as GET
        /v1/models)."""
        addresses = [urllib.parse.urlsplit(url) for url in self.engine_urls]
        hosts = [(address.hostname or "127.0.0.1", address.port or 80) for address in addresses]
        return hosts[: self.options.replicas] if self.options.pools else hosts

    def _pool_upstreams(self) -> dict[str, list[tuple[str, int]]]:
        """Each pool's Envoy cluster: its mocks."""
        clusters: dict[str, list[tuple[str, int]]] = {}
        for index, port in enumerate(self.options.replica_ports):
            pool = self.options.replica_pool(index)
            if pool is not None:
                clusters.setdefault(pool, []).append(("127.0.0.1", port))
        return clusters

    def _start_envoy(self) -> None:
        config = self.envoy_config(self.options.listen_port, self.options.envoy_admin_port)
        self.processes.append(
            start_envoy(
                config,
                self.options.work_dir,
                self.options.envoy_admin_port,
                concurrency=self.options.envoy_concurrency,
                env=self.envoy_env,
            )
        )


def _local_pki(directory: Path, client_name: str) -> LocalPki:
    """A throwaway CA for `tls`: made with cryptography, the stack extra's, imported only
    here, so that a plain install runs everything else."""
    try:
        from sidecar.tooling.stack.certificates import make_local_pki
    except ImportError as error:
        raise StackError(f"TLS needs pip install 'qos-sidecar[stack]' ({error})") from None
    return make_local_pki(directory, client_name)


def tls_server_args(files: TlsFiles) -> list[str]:
    """`serve`'s flags for mutual TLS with these files."""
    return [
        "--tls-cert-file", str(files.cert), "--tls-key-file", str(files.key),
        "--tls-client-ca-file", str(files.ca),
    ]  # fmt: skip


def tls_client_args(files: TlsFiles | None) -> list[str]:
    """`report`'s flags to speak TLS to the sidecar with these files (none: plaintext)."""
    if files is None:
        return []
    return [
        "--tls-ca-file", str(files.ca), "--tls-cert-file", str(files.cert),
        "--tls-key-file", str(files.key),
    ]  # fmt: skip


def mock_vllm_argv(port: int, *args: str) -> list[str]:
    """`qos-sidecar mock-vllm` on `port`, with these options."""
    return [sys.executable, "-m", "sidecar", "mock-vllm", "--port", str(port), *args]


def start_envoy(
    config: dict[str, Any],
    work_dir: Path,
    admin_port: int,
    name: str = "envoy",
    concurrency: int = 0,
    env: dict[str, str] | None = None,
) -> ManagedProcess:
    """Envoy running `config` (whose admin listens on `admin_port`), ready when it returns;
    `env`: secrets it reads from its environment (the sidecar's token).
    A config whose mode layer follows no sidecar's state directory here (the shipped
    path) reads an empty one of its own: Envoy does not start on a missing directory.
    (A config with no such layer, another gateway's, runs as it is.)"""
    if "layered_runtime" in config and not envoy_config.state_dir_of(config).is_dir():
        state = work_dir / f"{name}-state"
        state.mkdir(parents=True, exist_ok=True)
        config = envoy_config.with_state_dir(copy.deepcopy(config), state)
    path = envoy_config.write(config, work_dir / f"{name}.yaml")
    argv = [
        envoy_config.envoy_binary(),
        "-c",
        str(path),
        "--log-level",
        "warning",
        # Several Envoys share this machine in tests: no shared-memory hot restart.
        "--disable-hot-restart",
    ]
    if concurrency:
        argv += ["--concurrency", str(concurrency)]
    envoy = ManagedProcess(name, argv, work_dir / f"{name}.log", env)
    envoy.start_ready(lambda: readiness.envoy_ready(f"http://127.0.0.1:{admin_port}"))
    return envoy


@dataclass(frozen=True)
class RunningSidecar:
    process: ManagedProcess
    grpc_address: str
    admin_url: str


def start_sidecar(
    work_dir: Path,
    redis_url: str,
    *extra: str,
    name: str = "sidecar",
    grpc_port: int = 0,
    admin_port: int = 0,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
    state_dir: Path | None = None,
    tls: LocalPki | None = None,
) -> RunningSidecar:
    """`qos-sidecar serve` (on free ports unless given), ready when it returns; `python`:
    another interpreter (a venv with other library versions, for the benches); its state
    directory `state_dir`, by default one of its own under `work_dir`. Secrets
    (the Redis URL, which may hold a password; `env`'s) go in its environment, never on
    its command line, where any local user reads them."""
    grpc_port = grpc_port or free_port()
    admin_port = admin_port or free_port()
    address = f"127.0.0.1:{grpc_port}"
    process = ManagedProcess(
        name,
        [
            python,
            # Another interpreter runs its own install, not the checkout in the cwd.
            *(["-P"] if python != sys.executable else []),
            "-m",
            "sidecar",
            "serve",
            "--grpc-port",
            str(grpc_port),
            "--admin-port",
            str(admin_port),
            "--state-dir",
            str(state_dir or work_dir / f"{name}-state"),
            *(tls_server_args(tls.server) if tls is not None else []),
            *extra,
        ],
        work_dir / f"{name}.log",
        env={"REDIS_URL": redis_url, **(env or {})},
    )
    client = tls.client if tls is not None else None
    process.start_ready(lambda: readiness.grpc_serving(address, tls=client))
    return RunningSidecar(process, address, f"http://127.0.0.1:{admin_port}")
