"""The real engine, started once and shared by the tests of this folder (stopped after the
last of them, so the rest of the suite runs without it): vLLM's CPU build serving the
tiny model (sidecar/tooling/engine). QOS_TEST_ENGINE_URL points the tests at one already
running instead (started with the same EngineSettings)."""

from __future__ import annotations

import asyncio
import os

import pytest

from sidecar.tooling.engine import vllm
from tests.engine.engine_client import Engine

# 4 096 tokens a sequence (a long answer runs ~20 s on the tiny model), 4 at once: 513
# KV blocks of 32.
SETTINGS = vllm.EngineSettings(max_model_len=4096, max_num_seqs=4)


@pytest.fixture(scope="package")
def engine(tmp_path_factory):
    if url := os.environ.get("QOS_TEST_ENGINE_URL"):
        yield Engine(url, SETTINGS)
        return
    with vllm.serving(SETTINGS, tmp_path_factory.mktemp("engine")) as (url, _process):
        yield Engine(url, SETTINGS)


@pytest.fixture
def idle_engine(engine):
    """The engine with nothing running or waiting: what a test before it sent is over."""
    asyncio.run(engine.wait_idle())
    return engine
