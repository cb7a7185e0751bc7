"""A model server's refusal at its queue limit, through real Envoy: two stand-in pods, the
mock answering 503 past `--max-num-queued-reqs` as vLLM does (its words, its
`vllm:admission_rejections` counter). A request one pod refuses is served by the other;
the refusing pod is marked full (`qos_pod_refusing`); no request is tried more than twice,
whatever its client asks of Envoy; a request both pods refuse gets its reservation back."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import openai
import pytest

from sidecar.ports import free_port
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.processes import ManagedProcess
from sidecar.tooling.stack.stack import RunningEngines, Stack, StackOptions
from tests.integration.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY = "refusals-p1"
REQUESTS = 3  # where every pod refuses
# Where one pod refuses: requests sent until it had this many first (the balancer picks
# either pod).
REFUSED = 3
MOST_REQUESTS = 60
PROMPT = [{"role": "user", "content": "x" * 4 * 16}]  # 16 tokens of text, 20 templated
MAX_TOKENS = 100
FAST = ("--time-scale", "0.05")  # answers in a fraction of a second
# Retry asks a client may send, which Envoy would honour from a trusted one.
RETRY_ASKS = {"x-envoy-max-retries": "5", "x-envoy-retry-on": "5xx,reset"}


def start_mock(work_dir: Path, name: str, queue_limit: int | None) -> ManagedProcess:
    port = free_port()
    limit = () if queue_limit is None else ("--max-num-queued-reqs", str(queue_limit))
    argv = [sys.executable, "-m", "sidecar", "mock-vllm", "--port", str(port), *FAST, *limit]
    process = ManagedProcess(name, argv, work_dir / f"{name}.log")
    return process.start_ready(lambda: readiness.http_ok(f"http://127.0.0.1:{port}/health"))


def mock_url(process: ManagedProcess) -> str:
    return f"http://127.0.0.1:{process.argv[process.argv.index('--port') + 1]}"


@contextmanager
def two_pods(
    work_dir: Path, limits: tuple[int | None, int | None], config: dict, **tenant: object
) -> Iterator[tuple[Stack, list[str]]]:
    """Two mock pods with these queue limits behind a stack with a P1 tenant (these
    fields), and the pods' URLs."""
    with ExitStack() as stack_of:
        mocks = [start_mock(work_dir, f"pod-{i}", limit) for i, limit in enumerate(limits)]
        for mock in mocks:
            stack_of.callback(mock.stop)
        engines = RunningEngines(tuple(mock_url(mock) for mock in mocks))
        options = StackOptions.on_free_ports(work_dir, engines=engines, envoy_concurrency=1)
        stack = stack_of.enter_context(Stack(options))
        stack.config.set(config)
        stack.config.tenant("refusals", "p1", KEY, **tenant)
        yield stack, [mock_url(mock) for mock in mocks]


def engine_figure(url: str, name: str) -> float:
    """A counter of a pod's, summed over its series."""
    samples = scrape(f"{url}/metrics")
    return sum(value for key, value in samples.items() if key.split("{")[0] == name)


def refusals(url: str) -> float:
    return engine_figure(url, "vllm:admission_rejections_total")


def served(url: str) -> float:
    return engine_figure(url, "vllm:time_to_first_token_seconds_count")


def sidecar_figure(stack: Stack, key: str) -> float:
    return scrape(f"{stack.sidecar_admin_url}/metrics").get(key, 0.0)


def client(stack: Stack) -> openai.AsyncOpenAI:
    # No retries of the client's own: what is tried twice is Envoy's doing alone.
    return openai.AsyncOpenAI(base_url=f"{stack.envoy_url}/v1", api_key=KEY, max_retries=0)


async def test_a_request_one_pod_refuses_is_served_by_the_other(tmp_path):
    # The mark held long enough to be read after the last request.
    config = {"tiers": {"p1": {"output_weight": 0}}, "overload": {"refusal_hold_seconds": 30}}
    with two_pods(tmp_path, (0, None), config) as (stack, (refusing, serving)):
        sent = 0
        async with client(stack) as api:
            while refusals(refusing) < REFUSED and sent < MOST_REQUESTS:
                sent += 1
                answer = await api.chat.completions.create(
                    model="mock-llm",
                    messages=PROMPT,
                    max_tokens=MAX_TOKENS,
                    extra_headers=RETRY_ASKS,
                )
                assert answer.choices[0].message.content
        # Every request served, by the pod that takes work; the other refused each it was
        # sent first at most once, never again on a retry.
        assert served(serving) == sent
        assert REFUSED <= refusals(refusing) <= sent
        assert served(refusing) == 0
        pod = stack.pod_name(1)
        await wait_until(
            lambda: sidecar_figure(stack, f'qos_pod_refusing{{pod="{pod}"}}') == 1,
            what="the refusing pod marked full",
        )
        assert sidecar_figure(stack, f'qos_pod_refusing{{pod="{stack.pod_name(2)}"}}') == 0


async def test_a_request_every_pod_refuses_gets_its_reservation_back(tmp_path):
    # The pods' marks left out: what this test sees is the bucket alone.
    config = {"tiers": {"p1": {"output_weight": 1}}, "overload": {"refusal_hold_seconds": 0}}
    # The tenant's bucket holds one request's price (120 tokens: 20 of prompt, 100 of
    # output) and refills in minutes: a request is admitted again only if the one before
    # got its reservation back.
    bucket = {"rate_tokens_per_second": 1, "burst_seconds": 150}
    with two_pods(tmp_path, (0, 0), config, **bucket) as (stack, pods):
        async with client(stack) as api:
            for attempt in range(1, REQUESTS + 1):
                with pytest.raises(openai.APIStatusError) as refused:
                    await api.chat.completions.create(
                        model="mock-llm",
                        messages=PROMPT,
                        max_tokens=MAX_TOKENS,
                        extra_headers=RETRY_ASKS,
                    )
                # The engine's own 503, after each pod was tried once: the gateway's
                # shed (429, its bucket empty) would mean the charge was kept.
                assert refused.value.status_code == 503, refused.value.response.text
                assert refusals(pods[0]) == refusals(pods[1]) == attempt
                await wait_until(
                    lambda a=attempt: (
                        sidecar_figure(stack, 'qos_exchange_ends_total{how="refused",tier="p1"}')
                        == a
                    ),
                    what="the refusal settled",
                )
