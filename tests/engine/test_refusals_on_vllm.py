"""vLLM's refusal at its queue limit (--max-num-queued-reqs), and the gateway acting on it:
the mock refuses as vLLM does (status, body, counter); through Envoy, with one vLLM
refusing everything and the session's vLLM beside it, every request is served by the
other, the refusing engine refused each at most once, and the sidecar marks it full from
its own reporter's reading of vLLM's counter."""

from __future__ import annotations

import openai
import pytest

from sidecar.loops.dialects import registry
from sidecar.tooling.engine import vllm
from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.stack import RunningEngines
from tests.engine.conftest import serving, serving_mock
from tests.engine.stacks import stack_in_front
from tests.engine.test_mock_matches_vllm import chat, metrics_text, post
from tests.integration.helpers import wait_until

pytestmark = [pytest.mark.engine, pytest.mark.integration, pytest.mark.asyncio]

# Every request refused: nothing may be unfinished when it comes.
REFUSING = vllm.EngineSettings(max_num_queued_reqs=0)
KEY = "vllm-refusals-p1"
# Requests sent until the refusing engine had this many first (the balancer picks either).
REFUSED = 2
MOST_REQUESTS = 40


@pytest.fixture(scope="module")
def refusing_engine(tmp_path_factory):
    with serving(REFUSING, tmp_path_factory.mktemp("refusing-engine")) as started:
        yield started


@pytest.fixture(scope="module")
def refusing_mock(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("mock")
    with serving_mock(REFUSING, work_dir, "--max-num-queued-reqs", "0") as started:
        yield started


def refusals(url: str) -> int:
    return registry.read(metrics_text(url), "vllm").admission_rejections


async def test_the_mock_refuses_as_vllm_does(refusing_engine, refusing_mock):
    answers = {}
    for name, server in (("vllm", refusing_engine), ("mock", refusing_mock)):
        before = refusals(server.url)
        status, body, _ = await post(server.url, "/v1/chat/completions", chat(server))
        answers[name] = (status, body)
        assert refusals(server.url) == before + 1, name  # counted, as the dialect reads it
    assert answers["mock"] == answers["vllm"]
    status, body = answers["vllm"]
    assert status == 503 and body["error"]["type"] == "Service Unavailable", body


async def test_a_request_vllm_refuses_is_served_by_the_other_vllm(
    refusing_engine, idle_engine, tmp_path
):
    engines = RunningEngines(
        (refusing_engine.url, idle_engine.url), idle_engine.settings.scheduling_policy
    )
    # The mark held long enough to be read after the last request.
    config = {"overload": {"refusal_hold_seconds": 30}}
    before = refusals(refusing_engine.url)
    tenants = {"refusals": ("p1", KEY)}
    with stack_in_front(engines, tmp_path, "push", tenants, config) as stack:
        api = openai.AsyncOpenAI(base_url=f"{stack.envoy_url}/v1", api_key=KEY, max_retries=0)
        sent = 0
        async with api:
            while refusals(refusing_engine.url) - before < REFUSED and sent < MOST_REQUESTS:
                answer = await api.chat.completions.create(
                    model=idle_engine.settings.served_model,
                    messages=[{"role": "user", "content": "Where is my order?"}],
                    max_tokens=8,
                )
                sent += 1
                assert answer.choices[0].message.content is not None
        refused = refusals(refusing_engine.url) - before
        assert REFUSED <= refused <= sent  # each at most once: never tried there again
        pod = stack.pod_name(1)
        await wait_until(
            lambda: (
                scrape(f"{stack.sidecar_admin_url}/metrics").get(f'qos_pod_refusing{{pod="{pod}"}}')
                == 1
            ),
            within=30,
            what="the refusing vLLM marked full",
        )
