"""Model pools without servers: configuration, resolution, per-pool load, slots, keys."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from redis.crc import key_slot

from sidecar.budget_layout import tenant_bucket_key, tier_bucket_key
from sidecar.config.base import Tier, describe
from sidecar.config.operator_state import Tenant
from sidecar.config.pools import DEFAULT_POOL
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot, hash_api_key
from sidecar.loops.overload.load import PodLoad, aggregate, pool_of
from sidecar.loops.overload.shedding import SheddingState
from sidecar.loops.slo.samples import samples_key
from sidecar.request.admission.director import AdmissionDirector
from sidecar.request.admission.identity import IdentityResolver
from sidecar.request.bodies.tokens import estimate
from sidecar.request.limiter.buckets import Verdict
from sidecar.request.policy.decision import Admit, RequestView, Respond
from sidecar.request.queueing.queue import AdmissionQueue

TWO_POOLS = {
    "pools": {
        "chat": {"models": ["llama-8b", "chat"], "max_concurrency": 4},
        "shop": {
            "models": ["qwen-72b"],
            "capacity_tokens_per_second": 20_000,
            "tiers": {"p2": {"shed_below_free_kv": 0.30, "share": 0.01}},
            "slo_targets": {"p0": {"ttft_ms": 500}},
        },
    }
}


def config(document: dict) -> QosConfig:
    return QosConfig.from_partial(document)


def refused(document: dict) -> str:
    with pytest.raises(ValidationError) as error:
        config(document)
    return describe(error.value)


def test_no_pools_is_one_default_pool_with_the_top_level_settings():
    snapshot = Snapshot(1, QosConfig())
    (pool,) = snapshot.pools
    assert pool.name == DEFAULT_POOL and snapshot.pools.for_model("anything") is pool
    assert snapshot.pools.for_model(None) is pool
    assert pool.fleet == QosConfig().fleet and pool.tiers == QosConfig().tiers


def test_a_pool_falls_back_to_the_top_level_for_what_it_leaves_out():
    pools = Snapshot(1, config(TWO_POOLS)).pools
    chat, shop = pools.get("chat"), pools.get("shop")
    assert pools.for_model("chat") is chat and pools.for_model("qwen-72b") is shop
    assert chat.fleet.max_concurrency == 4
    assert chat.capacity_tokens_per_second == QosConfig().fleet.capacity_tokens_per_second
    assert shop.fleet.max_concurrency == QosConfig().fleet.max_concurrency
    assert shop.capacity_tokens_per_second == 20_000
    assert shop.tiers.p2.shed_below_free_kv == 0.30 and chat.tiers.p2.shed_below_free_kv == 0.15
    assert shop.tiers.p2.shed_above_inflight == 0.80  # a key the pool did not name
    assert shop.slo.p0.ttft_ms == 500 and shop.slo.p0.compliance == 0.99
    assert pools.for_model("gpt-4") is None  # no default pool configured: unknown


def test_a_default_pool_takes_the_models_no_pool_names():
    pools = Snapshot(1, config({"pools": {**TWO_POOLS["pools"], "default": {}}})).pools
    assert pools.for_model("gpt-4").name == DEFAULT_POOL
    assert pools.for_model("llama-8b").name == "chat"


def test_a_model_claimed_by_two_pools_is_refused_naming_both():
    message = refused({"pools": {"a": {"models": ["m", "x"]}, "b": {"models": ["y", "m"]}}})
    assert "'m'" in message and "'a'" in message and "'b'" in message


@pytest.mark.parametrize(
    ("pools", "named"),
    [
        ({"x": {"models": ["m"], "tiers": {"p2": {"shed_below": 0.1}}}}, "pools.x.tiers.p2"),
        ({"x": {"models": ["m"], "tiers": {"p2": {"share": 0.5}}}}, "pools.x.tiers"),
        ({"x": {"models": ["m"], "slo_targets": {"p0": {"ttft_ms": -1}}}}, "pools.x.slo_targets"),
        ({"x": {}}, "pools.x.models"),
        ({"x": {"models": ["m"], "max_concurrency": 0}}, "pools.x.max_concurrency"),
        ({"Bad Name": {"models": ["m"]}}, "pools.Bad Name"),
        ({"x": {"models": ["m"], "modles": []}}, "pools.x.modles"),
    ],
)
def test_a_bad_pool_is_refused_naming_the_key(pools, named):
    assert named in refused({"pools": pools})


def test_an_exported_configuration_imports_back_as_it_was():
    original = config(TWO_POOLS)
    exported = json.loads(original.model_dump_json())
    assert QosConfig.model_validate(exported) == original
    assert QosConfig.from_partial(exported) == original


def test_bucket_keys_carry_the_pool_and_keep_a_call_in_one_cluster_slot():
    assert tier_bucket_key("p1") == tier_bucket_key("p1", DEFAULT_POOL) == "qos:{bucket-p1}:tier"
    keys = [
        tier_bucket_key("p1", "chat"),
        tier_bucket_key("p1", "shop"),
        tenant_bucket_key("p1", "acme"),
        tenant_bucket_key("p1", "acme", "chat"),
    ]
    assert len(set(keys)) == 4
    assert len({key_slot(key.encode()) for key in keys}) == 1
    assert samples_key(Tier.P0) == "qos:{qos-slo}:samples:p0"
    assert samples_key(Tier.P0, "chat") != samples_key(Tier.P0)


def pod(name, usage, model="", pool="", capacity=0.0, running=0) -> PodLoad:
    return PodLoad(
        name, usage, 1000, running, 0, model=model, pool=pool, capacity_tokens_per_second=capacity
    )


def test_a_pod_counts_for_the_pool_its_reporter_names_or_the_one_serving_its_model():
    pools = Snapshot(1, config(TWO_POOLS)).pools
    assert pool_of(pod("a", 0.1, model="llama-8b"), pools) == "chat"
    assert pool_of(pod("b", 0.1, model="llama-8b", pool="shop"), pools) == "shop"
    assert pool_of(pod("c", 0.1, model="gpt-4"), pools) is None
    assert pool_of(pod("d", 0.1, pool="gone"), pools) is None
    unpooled = Snapshot(1, QosConfig()).pools
    assert pool_of(pod("e", 0.1, model="anything"), unpooled) == DEFAULT_POOL


def test_capacity_is_what_the_pods_say_a_silent_pod_counted_as_the_median():
    assert aggregate([pod("a", 0.1), pod("b", 0.1)]).capacity_tokens_per_second is None
    load = aggregate([pod("a", 0.1, capacity=100), pod("b", 0.1, capacity=300), pod("c", 0.1)])
    assert load.capacity_tokens_per_second == 100 + 300 + 200


def test_shedding_per_pool_uses_the_pool_s_thresholds_and_limit():
    snapshot = Snapshot(1, config(TWO_POOLS))
    shop, chat = snapshot.pools.get("shop"), snapshot.pools.get("chat")
    busy = aggregate([pod("a", 0.75)])  # 25 % free: below shop's 30 %, above the default 15 %
    shop_state, chat_state = SheddingState(), SheddingState()
    shop_state.update(busy, snapshot.config, pool=shop)
    chat_state.update(busy, snapshot.config, 4, pool=chat)  # 4 of chat's 4 slots held
    assert shop_state.shedding[Tier.P2] == "shed_kv_watermark"
    assert chat_state.shedding[Tier.P2] == "shed_inflight"
    assert shop_state.capacity(shop) == 20_000
    top = SheddingState(pools={"shop": shop_state})
    assert top.for_pool("shop") is shop_state and top.for_pool("other") is top


@pytest.mark.asyncio
async def test_each_pool_has_its_own_slots():
    snapshot = Snapshot(1, config(TWO_POOLS))
    chat, shop = snapshot.pools.get("chat"), snapshot.pools.get("shop")
    queue = AdmissionQueue(lambda: snapshot.config)
    held = [queue.try_take(Tier.P1, "t", pool=chat) for _ in range(4)]
    assert all(held) and queue.try_take(Tier.P0, "t", pool=chat) is None  # chat is full
    assert queue.try_take(Tier.P2, "t", pool=shop) is not None  # shop is not
    assert queue.cluster_in_flight_in("chat") == 4 and queue.cluster_in_flight_in("shop") == 1
    queue.release(held[0].id)
    assert queue.try_take(Tier.P0, "t", pool=chat).pool == "chat"


KEYS = {hash_api_key("k-p1"): "acme"}


def decider(document: dict, tenant: Tenant | None = None) -> tuple[AdmissionDirector, list]:
    calls: list = []

    class Limiter:
        async def acquire(self, cost, buckets, load=None, otherwise=None):
            calls.append(list(buckets))
            return Verdict(True)

    async def lookup(digest):
        return KEYS.get(digest)

    snapshot = Snapshot(1, config(document), {"acme": tenant or Tenant(tier=Tier.P1)})
    return (
        AdmissionDirector(lambda: snapshot, IdentityResolver(lookup), Limiter(), estimate),
        calls,
    )


def request(model: str | None, **headers: str) -> RequestView:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    if model is not None:
        body["model"] = model
    headers = {":method": "POST", "authorization": "Bearer k-p1", **headers}
    return RequestView("POST", "/v1/chat/completions", headers, json.dumps(body).encode())


@pytest.mark.asyncio
async def test_a_request_goes_to_its_model_s_pool_and_a_client_cannot_choose_another():
    pooled, calls = decider(TWO_POOLS)
    admit = await pooled.decide(request("qwen-72b", **{"x-qos-pool": "chat"}))
    assert isinstance(admit, Admit)
    upstream = admit.upstream
    assert upstream.set_headers["x-qos-pool"] == "shop" and upstream.reroute
    assert admit.record.pool == "shop"
    (tier_bucket,) = calls[-1]
    assert tier_bucket.key == tier_bucket_key("p1", "shop")
    assert tier_bucket.rate == pytest.approx(0.35 * 20_000)  # shop's capacity, P1's share
    unpooled, _ = decider({})
    plain = (await unpooled.decide(request("anything", **{"x-qos-pool": "chat"}))).upstream
    assert "x-qos-pool" not in plain.set_headers and not plain.reroute
    assert "x-qos-pool" in plain.remove_headers


@pytest.mark.asyncio
async def test_a_model_no_pool_serves_gets_a_404_model_not_found():
    pooled, calls = decider(TWO_POOLS)
    for model in ("gpt-4", None):
        answer = await pooled.decide(request(model))
        assert isinstance(answer, Respond) and answer.status == 404
        error = json.loads(answer.body)["error"]
        assert (error["code"], error["param"]) == ("model_not_found", "model")
    assert calls == []  # decided without Redis


@pytest.mark.asyncio
async def test_a_tenant_s_rate_is_shared_across_pools_unless_set_for_one():
    tenant = Tenant(tier=Tier.P1, rate_tokens_per_second=100, pool_rates={"shop": 30})
    pooled, calls = decider(TWO_POOLS, tenant)
    await pooled.decide(request("llama-8b"))
    await pooled.decide(request("qwen-72b"))
    chat_tenant, shop_tenant = calls[0][1], calls[1][1]
    assert (chat_tenant.key, chat_tenant.rate) == (tenant_bucket_key("p1", "acme"), 100)
    assert (shop_tenant.key, shop_tenant.rate) == (tenant_bucket_key("p1", "acme", "shop"), 30)
