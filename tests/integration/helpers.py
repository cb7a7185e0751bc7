"""Small clients for the integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import yaml

from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.admin_client import scrape, sidecar_config_version
from sidecar.tooling.stack.certificates import LocalPki
from sidecar.tooling.stack.processes import ManagedProcess
from sidecar.tooling.stack.stack import Stack, StackOptions

__all__ = [
    "SteadyLoad",
    "budgets_local",
    "chat_once",
    "cli",
    "decision_count",
    "flood",
    "p1_in_flight",
    "readyz",
    "recorded",
    "recording_upstream",
    "run_cli",
    "scrape",
    "settlement_counts",
    "sidecar_config_version",
    "stack_with_tenant",
    "stack_with_tenants",
    "to_one_upstream",
    "wait_until",
]


@contextmanager
def recording_upstream(work_dir: Path) -> Iterator[int]:
    """A model server that routes as vLLM's does and records every request that reaches
    it (tests/integration/starlette_upstream.py): its port, while the block lasts."""
    port = free_port()
    upstream = ManagedProcess(
        "recorder",
        [sys.executable, "-m", "uvicorn", "tests.integration.starlette_upstream:app",
         "--port", str(port), "--log-level", "warning"],
        work_dir / f"recorder-{port}.log",
    )  # fmt: skip
    upstream.start_ready(lambda: readiness.http_ok(f"http://127.0.0.1:{port}/__recorded"))
    try:
        yield port
    finally:
        upstream.stop()


def recorded(upstream: int) -> list[dict]:
    """What reached the recording model server, in order."""
    with urllib.request.urlopen(f"http://127.0.0.1:{upstream}/__recorded", timeout=5) as r:
        return json.loads(r.read())


def to_one_upstream(config: dict, port: int) -> dict:
    """An Envoy config (in place) whose default pool is the one server on `port`."""
    for cluster in config["static_resources"]["clusters"]:
        if cluster["name"] == "vllm":
            (endpoints,) = cluster["load_assignment"]["endpoints"]
            endpoints["lb_endpoints"] = endpoints["lb_endpoints"][:1]
            address = endpoints["lb_endpoints"][0]["endpoint"]["address"]
            address["socket_address"]["port_value"] = port
    return config


@contextmanager
def stack_with_tenants(
    work_dir: Path, tenants: dict[str, tuple[str, str]], **options: object
) -> Iterator[Stack]:
    """A fast local stack (by default two mock GPUs at 20x speed, one Envoy worker) with
    these tenants, each `name: (tier, api key)`."""
    defaults: dict[str, object] = {"time_scale": 0.05, "envoy_concurrency": 1}
    with Stack(StackOptions.on_free_ports(work_dir, **{**defaults, **options})) as stack:
        for name, (tier, key) in tenants.items():
            stack.config.tenant(name, tier, key)
        yield stack


def stack_with_tenant(
    work_dir: Path, tenant: str, tier: str, key: str, **options: object
) -> contextlib.AbstractContextManager[Stack]:
    """A fast local stack with one tenant and its key."""
    return stack_with_tenants(work_dir, {tenant: (tier, key)}, **options)


# The report token the `sidecars` fixture's sidecars ask of pushed reports.
REPORT_TOKEN = "test-report-token"


def decision_count(
    sidecar_admin_url: str, outcome: str = "admit", reason: str = "", reach: float = 0.0
) -> float:
    """Decisions the sidecar counted with this outcome (and reason), over all tiers. With
    `reach`, read until the count reaches it (10 s at most): a decision is counted just
    after its answer is on its way, so its client may hear the answer first."""
    deadline = time.monotonic() + 10.0
    while (count := _decisions(sidecar_admin_url, outcome, reason)) < reach:
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return count


def _decisions(sidecar_admin_url: str, outcome: str, reason: str) -> float:
    samples = scrape(f"{sidecar_admin_url}/metrics")
    wanted = f'outcome="{outcome}"'
    return sum(
        value
        for name, value in samples.items()
        if name.startswith("qos_decisions_total{")
        and wanted in name
        and (not reason or f'reason="{reason}"' in name)
    )


def budgets_local(stack: Stack) -> bool:
    """The sidecar enforces budgets alone (Redis unreachable)."""
    return scrape(f"{stack.sidecar_admin_url}/metrics")["qos_budgets_local{}"] == 1


def _ext_proc_stats(stack: Stack) -> dict[str, int]:
    url = f"{stack.envoy_admin_url}/stats?filter=ext_proc"
    with urllib.request.urlopen(url, timeout=5) as r:
        lines = r.read().decode().splitlines()
    prefix = "http.llm_ingress.ext_proc."
    return {
        name.removeprefix(prefix): int(value)
        for name, value in (line.split(": ") for line in lines)
        if name.startswith(prefix)
    }


def ext_proc_messages(stack: Stack) -> tuple[int, int]:
    """Messages Envoy sent to the sidecar and received from it, so far."""
    stats = _ext_proc_stats(stack)
    return stats["stream_msgs_sent"], stats["stream_msgs_received"]


def failed_open(stack: Stack) -> int:
    """Requests Envoy sent on undecided (the sidecar slow or away: failure_mode_allow)."""
    return _ext_proc_stats(stack)["failure_mode_allowed"]


def admitted_count(sidecar_admin_url: str, reach: float = 0.0) -> float:
    return decision_count(sidecar_admin_url, "admit", "admitted", reach)


async def cli(redis_url: str, *args: str, given: str | None = None) -> str:
    """`qos-sidecar ARGS` as an operator runs it; its output (it must succeed)."""
    code, output = await run_cli(redis_url, *args, given=given)
    assert code == 0, output
    return output


async def run_cli(redis_url: str, *args: str, given: str | None = None) -> tuple[int, str]:
    """`qos-sidecar ARGS` as an operator runs it (`given` on its standard input): its
    exit code and its output."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sidecar",
        *args,
        "--redis-url",
        redis_url,
        stdin=asyncio.subprocess.DEVNULL if given is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate(None if given is None else given.encode())
    assert process.returncode is not None
    return process.returncode, output.decode()


async def wait_until(check: Callable[[], bool], within: float = 10.0, what: str = "") -> None:
    """Poll a remote state until it holds; fail clearly when it never does."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within {within} s: {what or check}")


PAYMENT = {"messages": [{"role": "user", "content": "pay"}], "max_tokens": 2}


async def chat_once(
    session: aiohttp.ClientSession,
    url: str,
    key: str,
    body: dict | None = None,
    header: str = "x-qos-decision",
) -> tuple[int, str | None]:
    """One chat completion through Envoy: its status and one response header."""
    async with session.post(
        f"{url}/v1/chat/completions",
        json=body or PAYMENT,
        headers={"Authorization": f"Bearer {key}"},
    ) as response:
        await response.read()
        return response.status, response.headers.get(header)


class SteadyLoad:
    """Clients each sending one request after another, 20 ms apart, for as long as the
    `async with` lasts; what each request got is in `results`, in order."""

    def __init__(
        self, send: Callable[[aiohttp.ClientSession], Awaitable[tuple]], clients: int = 4
    ) -> None:
        self._send = send
        self._clients = clients
        self.results: list[tuple] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> SteadyLoad:
        self._session = aiohttp.ClientSession()
        self._tasks = [asyncio.create_task(self._client()) for _ in range(self._clients)]
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self._stop.set()
        try:
            await asyncio.gather(*self._tasks)
        finally:
            assert self._session is not None
            await self._session.close()

    async def _client(self) -> None:
        assert self._session is not None
        while not self._stop.is_set():
            self.results.append(await self._send(self._session))
            await asyncio.sleep(0.02)


def readyz(admin_url: str) -> tuple[int, str]:
    """/readyz's status and body."""
    try:
        with urllib.request.urlopen(f"{admin_url}/readyz", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def flood(
    url: str, seconds: float, body: dict, key: str, clients: int = 8, pause: float = 0.02
) -> list[dict]:
    """`clients` asking as fast as they are let for `seconds`, each waiting after a
    refusal as the official clients do, the `retry-after-ms` it names (else `pause`): the
    usage of every answer whose request was admitted in that time."""
    usages: list[dict] = []
    deadline = time.monotonic() + seconds

    async def client(session):
        while time.monotonic() < deadline:
            async with session.post(
                f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
            ) as response:
                answer = await response.json()
                if response.status == 429:  # over its rate: refused at once
                    wait = float(response.headers.get("retry-after-ms", pause * 1000)) / 1000
                    await asyncio.sleep(min(wait, max(0.0, deadline - time.monotonic())))
                    continue
                assert response.status == 200, answer
                usages.append(answer["usage"])

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return usages


def settled(stack: Stack, source: str, tier: str = "p1") -> float:
    """A tier's output tokens settled so far from this source (usage, estimate, abandoned)."""
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    key = f'qos_output_settled_tokens_total{{source="{source}",tier="{tier}"}}'
    return samples.get(key, 0.0)


def settlement_counts(stack: Stack) -> tuple[float, float, float]:
    """P1's output tokens reserved, settled from usage and settled by estimate, so far."""
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return (
        samples.get('qos_output_reserved_tokens_total{tier="p1"}', 0.0),
        samples.get('qos_output_settled_tokens_total{source="usage",tier="p1"}', 0.0),
        samples.get('qos_output_settled_tokens_total{source="estimate",tier="p1"}', 0.0),
    )


def p1_in_flight(stack: Stack) -> float:
    """P1 exchanges admitted whose end has not been settled yet (slots held)."""
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return samples.get('qos_requests_in_flight{tier="p1"}', 0.0)


async def chat_exchange(
    url: str, key: str, body: dict, leave_after: int | None = None
) -> dict | None:
    """One chat exchange through Envoy at `url`, answered 200 by the model server: the
    usage it carried, if any; with `leave_after`, the client leaves a stream after that
    many lines (closing the connection mid-stream)."""
    usage, lines = None, 0
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
        ) as response,
    ):
        assert response.status == 200 and "x-qos-decision" not in response.headers
        if not body.get("stream"):
            return (await response.json())["usage"]
        async for line in response.content:
            lines += 1
            if line.startswith(b"data: {") and b'"usage":{' in line:
                usage = json.loads(line[6:])["usage"]
            if leave_after is not None and lines >= leave_after:
                return None
    return usage


def envoy_figure(stack, name: str) -> str | None:
    """One figure from Envoy's admin: a runtime value, or a stat."""
    if name.startswith("qos."):
        with urllib.request.urlopen(f"{stack.envoy_admin_url}/runtime", timeout=5) as response:
            entry = json.load(response)["entries"].get(name)
        return None if entry is None else entry["final_value"]
    with urllib.request.urlopen(
        f"{stack.envoy_admin_url}/stats?filter=^{name}$", timeout=5
    ) as response:
        text = response.read().decode()
    return text.split(":", 1)[1].strip() if ":" in text else None


# The Kubernetes files: the push variant at the top (`kubectl apply -k deploy/kubernetes`),
# the base and the other variants in folders below it.
KUSTOMIZATION = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"


def built(kustomization: Path = KUSTOMIZATION) -> list[dict]:
    """What `kubectl kustomize` makes of a kustomization, as `kubectl apply -k` applies it."""
    output = subprocess.run(
        ["kubectl", "kustomize", str(kustomization)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [document for document in yaml.safe_load_all(output) if document]


def named(documents: list[dict], kind: str, prefix: str) -> dict:
    (found,) = [
        d for d in documents if d["kind"] == kind and d["metadata"]["name"].startswith(prefix)
    ]
    return found


def kubernetes_envoy_here(work: Path, pki: LocalPki) -> Path:
    """deploy/kubernetes/base/envoy.yaml as this machine runs it: the pod's TLS Secret
    (qos-grpc-tls: `pki`'s server certificate, which the pod's Envoy presents too) and
    the SDS files beside the config, in `work`. The config's path."""
    base = KUSTOMIZATION / "base"
    secret, etc = work / "qos-tls", work / "envoy-etc"
    secret.mkdir(parents=True, exist_ok=True)
    etc.mkdir(parents=True, exist_ok=True)
    files = pki.server
    assert files.cert is not None and files.key is not None and files.ca is not None
    for source, name in ((files.cert, "tls.crt"), (files.key, "tls.key"), (files.ca, "ca.crt")):
        shutil.copyfile(source, secret / name)

    def here(text: str) -> str:
        return text.replace("/etc/qos-tls", str(secret)).replace("/etc/envoy/", f"{etc}/")

    for name in ("sds-certificate.yaml", "sds-ca.yaml"):
        (etc / name).write_text(here((base / name).read_text()))
    config = etc / "envoy.yaml"
    config.write_text(here((base / "envoy.yaml").read_text()))
    return config


_WORDS = re.compile(rb'"(content|text)":"(?:[^"\\]|\\.)*"')
_IDS = re.compile(rb'"id":"[^"]*"')
_CREATED = re.compile(rb'"created":\d+')


def normalised(stream: bytes) -> bytes:
    """The stream with the engine's ids, times and words blanked: what is left is its
    every other byte, chunk for chunk."""
    for pattern, blank in ((_WORDS, rb'"\1":""'), (_IDS, b'"id":""'), (_CREATED, b'"created":0')):
        stream = pattern.sub(blank, stream)
    return stream
