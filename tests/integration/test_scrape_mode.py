"""Scrape mode through Envoy: three mock pods behind one DNS name (a real DNS server on
loopback answering for it, as a headless Service's would), no reporter beside any of
them, two sidecars scraping by lease. The scraped load drives P2's shedding; when the
scraping sidecar dies the other takes over within the lease; a pod that leaves the name
stops counting after its report's TTL."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys

import aiohttp
import pytest

from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.store import ConfigStore
from sidecar.ports import free_port
from sidecar.tooling.stack import envoy_config, readiness
from sidecar.tooling.stack.processes import ManagedProcess
from sidecar.tooling.stack.stack import start_envoy, start_sidecar
from tests.integration.dns_server import DnsServer
from tests.integration.helpers import scrape, wait_until
from tests.integration.test_kv_watermark import KEYS, SLOW_GPU, filling, probe

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

NAME = "vllm.inference.test"
PODS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
LEASE_SECONDS = 0.5  # under the reports' 1 s TTL, as the default (0.8 s)


def start_mock(work_dir, host: str, port: int) -> ManagedProcess:
    process = ManagedProcess(
        f"mock-{host}",
        [
            sys.executable,
            "-m",
            "sidecar",
            "mock-vllm",
            "--host",
            host,
            "--port",
            str(port),
            *SLOW_GPU,
        ],
        work_dir / f"mock-{host}.log",
    )
    return process.start_ready(lambda: readiness.http_ok(f"http://{host}:{port}/health"))


def scraping(admin_url: str) -> bool:
    return scrape(f"{admin_url}/metrics").get('qos_scrape_leader{group="default"}') == 1


def pods_reporting(admin_url: str) -> float:
    return scrape(f"{admin_url}/metrics").get("qos_pods_reporting{}", -1)


async def fill(session, url: str) -> None:
    """A P0-sized stream straight to one pod, taking 553 of its 625 blocks until cancelled."""
    async with session.post(f"{url}/v1/chat/completions", json=filling(553)) as response:
        assert response.status == 200
        async for _ in response.content:
            pass


async def test_scraped_pods_drive_shedding_and_survive_the_scraper(tmp_path, redis_url, aredis):
    store = ConfigStore(aredis)
    await store.save_config(QosConfig.from_partial({"tiers": {"p0": {"max_prompt_tokens": None}}}))
    for tier, key in KEYS.items():
        await store.put_tenant(f"tenant-{tier}", Tenant(tier=Tier(tier)), key)
    port = free_port()
    started: list[ManagedProcess] = []
    async with DnsServer({NAME: list(PODS)}) as dns_server:
        flags = (
            "--scrape-targets",
            f"dns:{NAME}:{port}",
            "--scrape-dns-server",
            dns_server.address,
            "--scrape-interval",
            "0.1",
            "--scrape-lease-seconds",
            str(LEASE_SECONDS),
            "--scrape-resolve-seconds",
            "0.3",
        )
        try:
            for host in PODS:
                started.append(await asyncio.to_thread(start_mock, tmp_path, host, port))
            # The first sidecar takes the lease before the second starts: it is the one
            # to kill; Envoy is in front of the second.
            first = await asyncio.to_thread(
                start_sidecar, tmp_path, redis_url, *flags, name="sidecar-1"
            )
            started.append(first.process)
            await wait_until(lambda: scraping(first.admin_url), what="the first scraping")
            second = await asyncio.to_thread(
                start_sidecar, tmp_path, redis_url, *flags, name="sidecar-2"
            )
            started.append(second.process)
            listen, admin = free_port(), free_port()
            config = envoy_config.adapt(
                envoy_config.load(),
                listen=("127.0.0.1", listen),
                admin_port=admin,
                sidecar=("127.0.0.1", int(second.grpc_address.rsplit(":", 1)[1])),
                upstreams=[(host, port) for host in PODS],
            )
            started.append(
                await asyncio.to_thread(start_envoy, config, tmp_path, admin, "envoy", 1)
            )
            url = f"http://127.0.0.1:{listen}"
            await wait_until(lambda: pods_reporting(second.admin_url) == 3, what="3 pods scraped")
            assert not scraping(second.admin_url)

            async with aiohttp.ClientSession() as session:
                assert [await probe(session, url, t) for t in KEYS] == ["admit"] * 3
                fillers = [
                    asyncio.create_task(fill(session, f"http://{host}:{port}")) for host in PODS
                ]
                try:
                    free = "qos_cluster_free_kv_ratio{}"
                    await wait_until(
                        lambda: scrape(f"{second.admin_url}/metrics").get(free, 1.0) < 0.15,
                        what="the scraped fill",
                    )
                    assert [await probe(session, url, t) for t in KEYS] == [
                        "admit",
                        "admit",
                        "shed_kv_watermark",
                    ]

                    first.process.stop()  # the scraper dies; the other takes over
                    await wait_until(
                        lambda: scraping(second.admin_url),
                        within=LEASE_SECONDS + 3,
                        what="the second scraping",
                    )
                    await wait_until(
                        lambda: pods_reporting(second.admin_url) == 3, what="its pods reported"
                    )
                    assert (await probe(session, url, "p2")) == "shed_kv_watermark"

                    dns_server.records[NAME] = list(PODS[:2])  # a pod leaves the name
                    await wait_until(
                        lambda: pods_reporting(second.admin_url) == 2,
                        what="the removed pod no longer counting",
                    )
                    samples = scrape(f"{second.admin_url}/metrics")
                    assert samples[f'qos_scrape_target_up{{pod="127.0.0.1:{port}",reason=""}}'] == 1
                finally:
                    for filler in fillers:
                        filler.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await filler
        finally:
            for process in reversed(started):
                process.stop()


async def test_a_pod_that_does_not_answer_is_named_with_the_reason(tmp_path, redis_url):
    dead = free_port()  # nobody listens there
    sidecar = await asyncio.to_thread(
        start_sidecar, tmp_path, redis_url, "--scrape-targets", f"127.0.0.1:{dead}"
    )
    try:
        key = f'qos_scrape_target_up{{pod="127.0.0.1:{dead}",reason="unreachable"}}'
        await wait_until(
            lambda: scrape(f"{sidecar.admin_url}/metrics").get(key) == 0, what="the failure named"
        )
        errors = f'qos_scrape_errors_total{{pod="127.0.0.1:{dead}",reason="unreachable"}}'
        assert scrape(f"{sidecar.admin_url}/metrics")[errors] >= 1
        assert pods_reporting(sidecar.admin_url) == 0
    finally:
        sidecar.process.stop()


async def test_a_group_named_after_a_pool_reports_for_it(tmp_path, redis_url, aredis, mock_vllm):
    store = ConfigStore(aredis)
    pools = {"chat": {"models": ["chat-model"]}, "shop": {"models": ["mock-llm"]}}
    await store.save_config(QosConfig.from_partial({"pools": pools}))
    named = mock_vllm().rsplit("/", 1)[-1]  # host:port of a mock serving mock-llm
    unnamed = mock_vllm().rsplit("/", 1)[-1]
    sidecar = await asyncio.to_thread(
        start_sidecar, tmp_path, redis_url, "--scrape-targets", f"chat={named},{unnamed}"
    )
    try:
        # Both mocks serve mock-llm, the shop pool's model: the group names the first
        # one's pool (as report --pool does); without a group, the model does.
        def reporting(pool: str) -> float | None:
            samples = scrape(f"{sidecar.admin_url}/metrics")
            return samples.get(f'qos_pool_pods_reporting{{pool="{pool}"}}')

        await wait_until(
            lambda: reporting("chat") == 1 and reporting("shop") == 1, what="a pod in each pool"
        )
    finally:
        sidecar.process.stop()


async def test_a_silent_dns_server_does_not_hold_the_other_pods_up(tmp_path, redis_url, mock_vllm):
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))  # takes the questions, answers none (lookups time out)
    pod = mock_vllm().rsplit("/", 1)[-1]
    sidecar = await asyncio.to_thread(
        start_sidecar,
        tmp_path,
        redis_url,
        "--scrape-targets",
        f"{pod},dns:{NAME}:8000",
        "--scrape-dns-server",
        f"127.0.0.1:{silent.getsockname()[1]}",
        "--scrape-resolve-seconds",
        "0.1",
    )
    try:
        await wait_until(lambda: pods_reporting(sidecar.admin_url) == 1, what="the pod scraped")
        # Lookups take 2 s to give up, the pod's report lives 1 s: it stays fresh only if
        # the scrape rounds go on without waiting for them.
        for _ in range(15):
            await asyncio.sleep(0.2)
            assert pods_reporting(sidecar.admin_url) == 1
    finally:
        sidecar.process.stop()
        silent.close()
