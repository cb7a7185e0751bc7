"""The real engine, started once and shared by the tests of this folder (stopped after the
last of them, so the rest of the suite runs without it): vLLM's CPU build serving the
tiny model (sidecar/tooling/engine). QOS_TEST_ENGINE_URL points the tests at one already
running instead (started with the same EngineSettings)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest

from sidecar.ports import free_port
from sidecar.tooling.engine import vllm
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.processes import ManagedProcess
from sidecar.tooling.stack.stack import mock_vllm_argv
from tests.engine.engine_client import Engine

# 4 096 tokens a sequence (a long answer runs ~20 s on the tiny model), 4 at once: 513
# KV blocks of 32.
SETTINGS = vllm.EngineSettings(max_model_len=4096, max_num_seqs=4)


@contextmanager
def serving(settings: vllm.EngineSettings, work_dir: Path) -> Iterator[Engine]:
    """An engine of these settings, started for the block and stopped after it."""
    with vllm.serving(settings, work_dir) as (url, _process):
        yield Engine(url, settings)


@contextmanager
def serving_mock(settings: vllm.EngineSettings, work_dir: Path, *args: str) -> Iterator[Engine]:
    """mock-vllm with these arguments, standing for an engine of these settings, started
    for the block and stopped after it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = ManagedProcess("mock-vllm", mock_vllm_argv(port, *args), work_dir / "mock.log")
    process.start_ready(partial(readiness.http_ok, f"{url}/health"))
    try:
        yield Engine(url, settings)
    finally:
        process.stop()


def idle(engine: Engine) -> Engine:
    """The engine once nothing runs or waits on it: what a test before sent is over."""
    asyncio.run(engine.wait_idle())
    return engine


@pytest.fixture(scope="package")
def engine(tmp_path_factory):
    if url := os.environ.get("QOS_TEST_ENGINE_URL"):
        yield Engine(url, SETTINGS)
        return
    with serving(SETTINGS, tmp_path_factory.mktemp("engine")) as started:
        yield started


@pytest.fixture
def idle_engine(engine):
    return idle(engine)
