"""Model pools through real Envoy: two pools of mock GPUs behind one gateway, each with
its own load, limits and budgets. An overload of one sheds only its own traffic; the
pool a request goes to is the sidecar's to choose, by its model; a pool's budgets follow
the capacity its pods report, on every sidecar."""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp
import pytest

from sidecar.tooling.stack.stack import start_sidecar
from tests.integration.helpers import scrape, stack_with_tenants, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p0": "pools-p0", "p2": "pools-p2"}
PREFILL = 16_384  # tokens a second each mock GPU prefills in real time
PROMPT_TOKENS = 2_000


@pytest.fixture(scope="module")
def pools_stack(tmp_path_factory):
    """Pools pool-a (model-a) and pool-b (model-b) of one real-time mock GPU each."""
    with stack_with_tenants(
        tmp_path_factory.mktemp("pools-stack"),
        {f"pools-{tier}": (tier, key) for tier, key in KEYS.items()},
        pools=2,
        replicas=1,
        time_scale=1.0,
    ) as stack:
        yield stack


@pytest.fixture
def config(pools_stack):
    config = pools_stack.config
    yield config
    config.set({})


def chat(model: str, tokens: int = PROMPT_TOKENS) -> dict:
    # The mock counts a prompt as its characters / 4 plus 4 tokens a message.
    content = "x" * 4 * (tokens - 4)
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 4}


async def offer(session, url, model, tier, rate, seconds, rng, headers=None) -> list[str]:
    """Requests of `tier` for `model` at `rate` a second (Poisson) for `seconds`: each
    one's outcome, "served" or the reason it was shed."""

    async def one() -> str:
        async with session.post(
            f"{url}/v1/chat/completions",
            json=chat(model),
            headers={"Authorization": f"Bearer {KEYS[tier]}", **(headers or {})},
        ) as response:
            assert response.status == 200, await response.text()
            answer = await response.json()
            if "x-qos-decision" in response.headers:
                return response.headers["x-qos-decision"]
            assert answer["model"] == model  # served by the pool's own GPUs
            return "served"

    tasks = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tasks.append(asyncio.create_task(one()))
        await asyncio.sleep(rng.expovariate(rate))
    return list(await asyncio.gather(*tasks))


async def test_an_overloaded_pool_sheds_its_own_p2_and_no_other_pools(pools_stack, config):
    # Budgets out of the way: the GPUs themselves are the limit here. Pool A takes 12
    # requests at once at most (P2 is shed above 80 % of that).
    config.set(
        {
            "fleet": {"capacity_tokens_per_second": 10_000_000},
            "pools": {
                "pool-a": {"models": ["model-a", "mock-llm"], "max_concurrency": 12},
                "pool-b": {"models": ["model-b"], "max_concurrency": 40},
            },
        }
    )
    capacity = PREFILL / PROMPT_TOKENS  # requests a second one GPU prefills
    rng = random.Random(3)
    spoof = {"x-qos-pool": "pool-a"}  # a client's own pool header decides nothing
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        url = pools_stack.envoy_url
        # Pool A at 2.5x its capacity (a fifth of it P0), pool B at half of its.
        a_p0, a_p2, b_p0, b_p2 = await asyncio.gather(
            offer(session, url, "model-a", "p0", 0.5 * capacity, 8, rng),
            offer(session, url, "model-a", "p2", 2.0 * capacity, 8, rng),
            offer(session, url, "model-b", "p0", 0.2 * capacity, 8, rng, spoof),
            offer(session, url, "model-b", "p2", 0.3 * capacity, 8, rng, spoof),
        )
    assert set(a_p0) == {"served"}, a_p0  # P0 served in full in both pools
    assert set(b_p0) == {"served"}, b_p0
    assert set(b_p2) == {"served"}, b_p2  # B's P2 untouched by A's overload
    assert a_p2.count("shed_inflight") > len(a_p2) / 2, a_p2  # A sheds its own P2
    samples = scrape(f"{pools_stack.sidecar_admin_url}/metrics")
    sheds = {
        key: value
        for key, value in samples.items()
        if key.startswith("qos_decisions_total{") and 'outcome="respond"' in key
    }
    assert sheds and all('pool="pool-a"' in key for key in sheds), sheds


async def test_an_unknown_model_is_answered_as_vllm_would_and_nothing_goes_upstream(
    pools_stack, config
):
    def prefilled() -> float:
        return sum(
            value
            for url in pools_stack.engine_urls
            for key, value in scrape(f"{url}/metrics").items()
            if key.startswith("vllm:prompt_tokens_total")
        )

    before = prefilled()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{pools_stack.envoy_url}/v1/chat/completions",
            json=chat("gpt-unknown", 10),
            headers={"Authorization": f"Bearer {KEYS['p0']}", "x-qos-pool": "pool-b"},
        ) as response,
    ):
        assert response.status == 404
        error = (await response.json())["error"]
    assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "gpt-unknown" in error["message"]
    assert prefilled() == before


def p0_rate(admin_url: str, pool: str) -> float:
    samples = scrape(f"{admin_url}/metrics")
    return samples[f'qos_pool_tier_rate_tokens_per_second{{pool="{pool}",tier="p0"}}']


async def test_a_pool_s_budgets_follow_the_capacity_its_pods_report(
    pools_stack, config, start_process, tmp_path
):
    config.set(
        {
            "pools": {
                "pool-a": {
                    "models": ["model-a", "mock-llm"],
                    "capacity_tokens_per_second": PREFILL,
                },
                "pool-b": {"models": ["model-b"], "capacity_tokens_per_second": PREFILL},
            }
        }
    )
    other = start_sidecar(tmp_path, pools_stack.redis_url)  # a second gateway's sidecar
    try:
        admins = (pools_stack.sidecar_admin_url, other.admin_url)
        share = 0.60  # P0's, by default
        for admin in admins:
            await wait_until(lambda admin=admin: p0_rate(admin, "pool-a") == share * PREFILL)
        # A GPU joins pool A, its reporter naming the pool and the GPU's capacity (the pod
        # already there says none: it counts as much as the one that does).
        joined = start_process(
            "reporter-joined",
            "report",
            "--vllm-url",
            pools_stack.engine_urls[0],
            "--sidecar",
            pools_stack.sidecar_grpc,
            "--pod-id",
            "joined",
            "--pool",
            "pool-a",
            "--capacity-tokens-per-second",
            str(PREFILL),
            "--interval",
            "0.1",
            ready=lambda: True,
            env=pools_stack.reporter_env,
        )
        started = time.monotonic()
        for admin in admins:
            await wait_until(
                lambda admin=admin: p0_rate(admin, "pool-a") == share * 2 * PREFILL,
                within=2 - (time.monotonic() - started),
                what="the pool's rate raised by the new pod's share",
            )
        assert p0_rate(admins[1], "pool-b") == share * PREFILL  # the other pool unmoved
        joined.stop()
        for admin in admins:  # its report goes stale after its TTL (1 s)
            await wait_until(lambda admin=admin: p0_rate(admin, "pool-a") == share * PREFILL)
    finally:
        other.process.stop()


async def test_the_dashboard_shows_each_pool(pools_stack, config):
    config.set({"pools": {**pools_stack.options.pools_config()["pools"], "default": {}}})
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{pools_stack.sidecar_admin_url}/dashboard/api/state",
            headers={"Authorization": f"Bearer {pools_stack.admin_token}"},
        ) as response,
    ):
        pools = {pool["pool"]: pool for pool in (await response.json())["pools"]}
    assert set(pools) == {"pool-a", "pool-b", "default"}
    assert pools["pool-b"]["models"] == ["model-b"] and pools["default"]["models"] == []
    assert pools["pool-a"]["pods"] == pools["pool-b"]["pods"] == 1
    assert pools["default"]["pods"] == 0  # no pod serves a model only it takes
    assert pools["pool-b"]["rates"]["p0"] == pytest.approx(0.6 * pools["pool-b"]["capacity"])


async def test_a_pool_without_an_envoy_cluster_gets_an_openai_error(pools_stack, config):
    pools = pools_stack.options.pools_config()["pools"]
    config.set({"pools": {**pools, "pool-c": {"models": ["model-c"]}}})
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{pools_stack.envoy_url}/v1/chat/completions",
            json=chat("model-c", 10),
            headers={"Authorization": f"Bearer {KEYS['p0']}"},
        ) as response,
    ):
        assert response.status == 503
        assert (await response.json())["error"]["code"] == "pool_not_routed"
