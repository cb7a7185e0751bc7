"""Fixtures that start real components on free loopback ports and always stop them."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess
from sidecar.tooling.stack.redis_servers import start_redis_server
from sidecar.tooling.stack.stack import (
    REPORT_TOKEN_ENV,
    RunningSidecar,
    Stack,
    StackOptions,
    start_sidecar,
)
from tests.integration.helpers import REPORT_TOKEN

# The mock GPU runs 20x faster than real time so streams finish quickly in tests.
TEST_TIME_SCALE = 0.05


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> Stack:
    """Redis, two mock vLLM replicas, the sidecar and Envoy, shared by the session."""
    options = StackOptions.on_free_ports(
        tmp_path_factory.mktemp("stack"), time_scale=TEST_TIME_SCALE, envoy_concurrency=1
    )
    with Stack(options) as running:
        yield running


@pytest.fixture
def start_process(tmp_path):
    """Start a `python -m sidecar ...` child; it is stopped by PID when the test ends."""
    started: list[ManagedProcess] = []

    def start(
        name: str, *args: str, ready: Callable[[], bool], env: dict[str, str] | None = None
    ) -> ManagedProcess:
        process = ManagedProcess(
            name, [sys.executable, "-m", "sidecar", *args], tmp_path / f"{name}.log", env
        )
        started.append(process)
        process.start()
        process.wait_ready(ready)
        return process

    yield start
    for process in reversed(started):
        process.stop()


@pytest.fixture
def mock_vllm(start_process):
    """A factory: one mock vLLM on a free port with the given flags; returns its URL."""

    def start(*flags: str) -> str:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        start_process(
            f"mock-vllm-{port}",
            "mock-vllm",
            "--port",
            str(port),
            *flags,
            ready=lambda: readiness.http_ok(f"{url}/health"),
        )
        return url

    return start


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> str:
    """A real redis-server for the session; its URL."""
    port = free_port()
    process = start_redis_server(tmp_path_factory.mktemp("redis"), port)
    yield f"redis://127.0.0.1:{port}/0"
    process.stop()


@pytest.fixture
def redis_url(redis_server) -> str:
    """The session's Redis, emptied for this test."""
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    client.close()
    return redis_server


@pytest_asyncio.fixture
async def aredis(redis_url):
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def sidecars(tmp_path, redis_url):
    """A factory: `qos-sidecar serve` on free ports with the test's Redis and these flags."""
    started: list[RunningSidecar] = []

    def start(*flags: str, env: dict[str, str] | None = None) -> RunningSidecar:
        name = f"sidecar-{len(started)}"
        secrets = {REPORT_TOKEN_ENV: REPORT_TOKEN, **(env or {})}
        sidecar = start_sidecar(tmp_path, redis_url, *flags, name=name, env=secrets)
        started.append(sidecar)
        return sidecar

    yield start
    for sidecar in reversed(started):
        sidecar.process.stop()


@pytest.fixture
def browser(tmp_path):
    """A headless Chromium, driven by chromedriver; quit when the test ends."""
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'chrome'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    driver.set_window_size(1400, 900)
    yield driver
    driver.quit()
