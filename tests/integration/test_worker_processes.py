"""serve --processes 2 behind real Envoy: one gRPC port for both workers, each exchange's
end back at the worker holding its slot, one admin port with both workers' metrics, a
worker that dies started again."""

from __future__ import annotations

import asyncio
import os
import signal

import aiohttp
import pytest
import yaml

from sidecar.tooling.stack import envoy_config, readiness
from sidecar.tooling.stack.processes import children
from tests.integration.helpers import scrape, stack_with_tenants, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY = "workers-p1"
REQUESTS = 48


@pytest.fixture(scope="module")
def workers_stack(tmp_path_factory):
    work = tmp_path_factory.mktemp("workers")
    # Two streams a connection to the sidecar (envoy.yaml: 16): Envoy opens many
    # connections for the test's few exchanges, which the kernel spreads.
    config = envoy_config.load()
    cluster = next(c for c in config["static_resources"]["clusters"] if c["name"] == "qos_sidecar")
    options = cluster["typed_extension_protocol_options"]
    http = options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    http["explicit_http_config"]["http2_protocol_options"]["max_concurrent_streams"] = 2
    path = work / "envoy-template.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    with stack_with_tenants(
        work, {"workers": ("p1", KEY)}, sidecar_args=("--processes", "2"), envoy_config=path
    ) as stack:
        yield stack


def by_process(samples: dict[str, float], prefix: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for name, value in samples.items():
        if name.startswith(prefix) and 'process="' in name:
            process = name.split('process="', 1)[1].split('"', 1)[0]
            totals[process] = totals.get(process, 0.0) + value
    return totals


async def streamed(session, stack) -> int:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 40, "stream": True}
    async with session.post(
        f"{stack.envoy_url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
    ) as answer:
        async for _ in answer.content:
            pass
        return answer.status


async def test_both_workers_decide_and_every_end_reaches_its_worker(workers_stack):
    metrics = f"{workers_stack.sidecar_admin_url}/metrics"
    async with aiohttp.ClientSession() as session:
        statuses = await asyncio.gather(
            *(streamed(session, workers_stack) for _ in range(REQUESTS))
        )
    assert statuses == [200] * REQUESTS
    admitted = by_process(scrape(metrics), 'qos_decisions_total{outcome="admit"')
    assert set(admitted) == {"0", "1"} and all(count > 0 for count in admitted.values())
    assert sum(admitted.values()) == REQUESTS

    def ends(how: str) -> float:
        return sum(
            value
            for name, value in scrape(metrics).items()
            if name.startswith("qos_exchange_ends_total{") and f'how="{how}"' in name
        )

    # Envoy's access-log stream reaches one worker; the other's ends are passed on to it
    # and give its slots back as completed, not by the one-second fallback.
    await wait_until(lambda: ends("completed") >= REQUESTS, what="every exchange completed")
    assert ends("completed") == REQUESTS and ends("before_response") == 0
    held = by_process(scrape(metrics), "qos_requests_in_flight{")
    assert set(held) == {"0", "1"} and sum(held.values()) == 0


async def test_a_worker_that_dies_is_started_again(workers_stack):
    supervisor = workers_stack.process("sidecar").pid
    before = children(supervisor)
    assert len(before) == 2
    os.kill(before[0], signal.SIGKILL)
    await wait_until(
        lambda: len(children(supervisor)) == 2 and before[0] not in children(supervisor),
        within=15,
        what="the worker started again",
    )
    ready = f"{workers_stack.sidecar_admin_url}/readyz"
    await wait_until(lambda: readiness.http_ok(ready), within=30, what="both workers ready")
    async with aiohttp.ClientSession() as session:
        statuses = await asyncio.gather(*(streamed(session, workers_stack) for _ in range(8)))
    assert statuses == [200] * 8


async def test_the_dashboard_and_its_api_answer_on_the_one_admin_port(workers_stack):
    admin = workers_stack.sidecar_admin_url
    token = {"Authorization": f"Bearer {workers_stack.admin_token}"}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{admin}/dashboard/api/state", headers=token) as answer:
            assert answer.status == 200  # one token for both workers
            assert "mode" in await answer.json()
        async with session.get(f"{admin}/dashboard/api/state") as answer:
            assert answer.status == 401
        login = f"{admin}/dashboard?token={workers_stack.admin_token}"
        async with session.get(login, allow_redirects=False) as answer:
            # The worker's redirect and cookie reach the browser, not followed on its way.
            assert answer.status == 303 and answer.headers["Location"] == "/dashboard"
            cookie = answer.headers["Set-Cookie"].split(";", 1)[0]
        async with session.get(f"{admin}/dashboard", headers={"Cookie": cookie}) as page:
            assert page.status == 200 and "<html" in (await page.text()).lower()
