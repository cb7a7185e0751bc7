"""The admission decider with a fake limiter and directory: no servers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import dataclass, field

import pytest
import redis.asyncio as redis

from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode, OperatorMode, Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot, hash_api_key
from sidecar.loops.overload.shedding import SheddingState
from sidecar.refusals import Reason
from sidecar.request.admission.director import AdmissionDirector
from sidecar.request.admission.identity import IdentityResolver
from sidecar.request.bodies.tokens import estimate
from sidecar.request.limiter.buckets import Verdict
from sidecar.request.limiter.resilient import ResilientLimiter
from sidecar.request.policy.decision import Admit, Admitted, RequestView, Respond
from sidecar.request.queueing.queue import AdmissionQueue

KEYS = {hash_api_key("k-p2"): "bulk", hash_api_key("k-p0"): "pay", hash_api_key("k-cap"): "capped"}
TENANTS = {
    "bulk": Tenant(tier=Tier.P2),
    "pay": Tenant(tier=Tier.P0),
    "capped": Tenant(tier=Tier.P1, rate_tokens_per_second=100),
}


ALLOW = Verdict(True)


def named(verdict: Verdict, buckets) -> Verdict:
    """The verdict, its refusing bucket given by index in the test, named as a limiter
    names it: the bucket itself."""
    if isinstance(verdict.refused, int):
        return dataclasses.replace(verdict, refused=buckets[verdict.refused])
    return verdict


class FakeLimiter:
    def __init__(self, verdict: Verdict | Exception = ALLOW) -> None:
        self.verdict = verdict
        self.calls: list[tuple[float, list]] = []

    async def acquire(self, cost, buckets, load=None, otherwise=None):
        self.calls.append((cost, list(buckets)))
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return named(self.verdict, buckets)


class RefillsSoon(FakeLimiter):
    """Refuses the first call (the bucket refills in 10 ms), allows every other."""

    async def acquire(self, cost, buckets, load=None, otherwise=None):
        self.calls.append((cost, list(buckets)))
        if len(self.calls) == 1:
            return Verdict(False, refused=buckets[0], retry_after=0.01)
        return Verdict(True)


async def lookup(digest):
    return KEYS.get(digest)


@dataclass
class Begun:
    """A decision begun: its task, and how long it held its exchange for, if it did."""

    task: asyncio.Task
    holds: list[float] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return bool(self.holds)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def begin(decider, view: RequestView) -> Begun:
    """Run a decision until it is made or holds its exchange: then it waits."""
    holding = asyncio.Event()
    begun = Begun(None)

    async def hold(seconds: float) -> None:
        begun.holds.append(seconds)
        holding.set()

    begun.task = asyncio.create_task(decider.decide(view, hold))
    held = asyncio.create_task(holding.wait())
    await asyncio.wait({begun.task, held}, return_when=asyncio.FIRST_COMPLETED)
    held.cancel()
    return begun


def decider(limiter: FakeLimiter, **config) -> AdmissionDirector:
    snapshot = Snapshot(1, QosConfig.from_partial(config), TENANTS)
    return AdmissionDirector(lambda: snapshot, IdentityResolver(lookup), limiter, estimate)


# A prompt of 14 tokens: it fits the capped tenant's 50-token bucket.
SHORT = [{"role": "user", "content": "x" * 40}]


def chat(key: str | None = "k-p2", path="/v1/chat/completions", extra_headers=None, **body):
    headers = {":method": "POST", ":path": path, **(extra_headers or {})}
    if key:
        headers["authorization"] = f"Bearer {key}"
    payload = {"messages": [{"role": "user", "content": "x" * 400}], **body}
    return RequestView("POST", path, headers, json.dumps(payload).encode())


@pytest.mark.asyncio
async def test_admitted_request_is_tagged_and_spoofed_headers_are_dropped():
    limiter = FakeLimiter()
    spoof = {"x-qos-tier": "p0", "x-qos-tenant": "pay", "x-qos-priority": "0"}
    decision = await decider(limiter).decide(chat(extra_headers=spoof))
    assert isinstance(decision, Admit)
    assert decision.upstream.set_headers == {"x-qos-tier": "p2", "x-qos-tenant": "bulk"}
    # The spoofed one, the sidecar's own that the access log reads and the ones vLLM
    # schedules by, whether sent or not.
    assert decision.upstream.remove_headers == (
        "x-qos-priority",
        "x-qos-queue-wait-ms",
        "x-qos-slot",
        "x-vllm-priority",
        "x-data-parallel-rank",
        "x-llm-d-inference-objective",
        "x-llm-d-inference-fairness-id",
        "x-gateway-inference-objective",
        "x-gateway-inference-fairness-id",
        "x-gateway-destination-endpoint",
        "x-llm-d-model-name-rewrite",
        "x-gateway-model-name-rewrite",
        "x-llm-d-slo-ttft-ms",
        "x-slo-ttft-ms",
        "x-llm-d-slo-tpot-ms",
        "x-slo-tpot-ms",
    )
    assert decision.upstream.replace_body is None
    cost, buckets = limiter.calls[0]
    assert cost == 100 + 4  # 400 characters and one message
    assert [b.key for b in buckets] == ["qos:{bucket-p2}:tier"]
    assert buckets[0].rate == pytest.approx(2500) and buckets[0].burst == pytest.approx(1250)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("names", "objective", "fairness", "other"),
    [
        ("llm-d", "x-llm-d-inference-objective", "x-llm-d-inference-fairness-id", "x-gateway"),
        ("gateway-api", "x-gateway-inference-objective", "x-gateway-inference-fairness-id",
         "x-llm-d"),
    ],
)  # fmt: skip
async def test_the_endpoint_picker_is_told_the_tier_s_objective_and_the_tenant(
    names, objective, fairness, other
):
    extension = {
        "enabled": True,
        "header_names": names,
        "objectives": {"p0": "pay", "p1": "core", "p2": "batch"},
    }
    spoof = {
        "x-llm-d-inference-objective": "pay",
        "x-gateway-inference-objective": "pay",
        "x-gateway-destination-endpoint": "1.2.3.4",
    }
    decision = await decider(FakeLimiter(), inference_extension=extension).decide(
        chat(extra_headers=spoof)
    )
    assert isinstance(decision, Admit)
    headers = decision.upstream.set_headers
    assert headers[objective] == "batch"  # P2's, not the client's
    assert headers[fairness] == headers["x-qos-tenant"] == "bulk"
    assert not any(name.startswith(other) for name in headers)  # one picker's names
    removed = decision.upstream.remove_headers
    assert "x-gateway-destination-endpoint" in removed and objective not in removed
    # The other names' copies a client sent never reach the picker either.
    assert f"{other}-inference-objective" in removed


@pytest.mark.asyncio
async def test_cost_is_tokens_times_the_tier_weight_and_tenant_buckets_join():
    limiter = FakeLimiter()
    await decider(limiter, tiers={"p1": {"weight": 0.25}}).decide(chat("k-cap"))
    cost, buckets = limiter.calls[0]
    assert cost == pytest.approx(104 * 0.25)
    assert [b.key for b in buckets] == ["qos:{bucket-p1}:tier", "qos:{bucket-p1}:tenant:capped"]
    assert (buckets[1].rate, buckets[1].burst) == (100, 50)


@pytest.mark.asyncio
async def test_a_request_reserves_no_more_than_its_smallest_bucket_holds():
    """The capped tenant's bucket holds 50 (100 tokens/s, 0.5 s): asking 200 output
    tokens at output_weight 1, it reserves 50 and owes the rest when it is settled."""
    limiter = FakeLimiter()
    charged = decider(limiter, tiers={"p1": {"output_weight": 1.0, "weight": 0.1}})
    decision = await charged.decide(chat("k-cap", max_tokens=200))
    assert isinstance(decision, Admit)
    cost, buckets = limiter.calls[0]
    assert cost == pytest.approx(50) and buckets[1].debt == pytest.approx(100 * 60)
    assert buckets[0].debt == pytest.approx(buckets[0].rate * 60)


@pytest.mark.asyncio
async def test_only_a_prompt_no_burst_holds_is_too_big_and_the_message_says_the_fix():
    limiter = FakeLimiter()
    refused = await decider(limiter).decide(chat("k-cap"))  # 104 tokens, a 50-token bucket
    assert isinstance(refused, Respond) and refused.reason == "cost_exceeds_burst"
    message = json.loads(refused.body)["error"]["message"]
    assert "prompt costs 104" in message and "tenant capped" in message
    assert "--burst-seconds 1" in message  # 104 tokens at 100 a second
    assert limiter.calls == []  # decided without Redis


@pytest.mark.asyncio
async def test_the_tier_bucket_names_who_asks_for_its_fair_shares():
    limiter = FakeLimiter()
    await decider(limiter, fairness={"reserve": 0.4}).decide(chat("k-cap", messages=SHORT))
    await decider(limiter, fairness={"enabled": False}).decide(chat("k-cap", messages=SHORT))
    (_, fair), (_, plain) = limiter.calls
    share = fair[0].fair
    assert (share.tenant, share.weight, share.window_seconds) == ("capped", 1.0, 2.0)
    assert share.state_key == fair[0].key == "qos:{bucket-p1}:tier"  # in the bucket's hash
    assert share.reserve == pytest.approx(0.4 * fair[0].burst)
    assert fair[1].fair is None  # the tenant's own bucket is its alone
    assert plain[0].fair is None


@pytest.mark.asyncio
async def test_over_its_fair_share_a_tenant_is_shed_as_such():
    over = FakeLimiter(Verdict(False, refused=0, retry_after=9.0, over_fair_share=True))
    shed = await decider(over).decide(chat("k-p2", stream=True))
    assert isinstance(shed, Respond) and shed.reason == "shed_fair_share"
    # P0 is never shed for budget, fair share or not.
    admitted = await decider(over).decide(chat("k-p0"))
    assert isinstance(admitted, Admit) and admitted.record.reason == "admitted_over_budget"


@pytest.mark.asyncio
async def test_p0_body_is_rewritten_with_the_output_cap():
    decision = await decider(FakeLimiter()).decide(chat("k-p0", max_tokens=2048))
    assert isinstance(decision, Admit)
    assert json.loads(decision.upstream.replace_body)["max_tokens"] == 512


@pytest.mark.asyncio
async def test_exhausted_tier_budget_sheds_sheddable_tiers_only():
    empty = FakeLimiter(Verdict(False, refused=0, retry_after=0.3))
    shed = await decider(empty).decide(chat("k-p2", stream=True))
    assert isinstance(shed, Respond)
    assert (shed.status, shed.reason, shed.tier) == (200, "shed_tier_budget", "p2")
    assert shed.body.endswith(b"data: [DONE]\n\n")
    over = await decider(empty).decide(chat("k-p0"))
    assert isinstance(over, Admit) and over.record.reason == "admitted_over_budget"


@pytest.mark.asyncio
async def test_tenant_budget_and_impossible_costs_are_errors():
    tenant_empty = FakeLimiter(Verdict(False, refused=1, retry_after=2.5))
    limited = await decider(tenant_empty).decide(chat("k-cap", messages=SHORT))
    assert (limited.status, limited.reason, limited.headers["retry-after"]) == (
        429,
        "tenant_rate_limited",
        "3",
    )
    never = FakeLimiter(Verdict(False, refused=0, retry_after=None))
    too_big = await decider(never).decide(chat("k-p2"))
    assert (too_big.status, too_big.reason) == (400, "cost_exceeds_burst")


@pytest.mark.asyncio
async def test_bad_bodies_and_missing_keys_are_refused_before_any_budget_is_spent():
    limiter = FakeLimiter()
    bad = RequestView("POST", "/v1/chat/completions", {}, b"{not json")
    answer = await decider(limiter).decide(bad)
    assert (answer.status, answer.reason) == (400, "invalid_request")
    rejected = await decider(limiter, identity={"unknown": "reject"}).decide(chat(key=None))
    assert (rejected.status, rejected.reason) == (401, "unauthenticated")
    long_p0 = await decider(limiter).decide(
        chat("k-p0", messages=[{"role": "user", "content": "x" * 40_000}])
    )
    assert (long_p0.status, long_p0.reason) == (400, "prompt_too_long")
    assert limiter.calls == []


@pytest.mark.asyncio
async def test_other_paths_pass_through_uncharged_but_tagged():
    limiter = FakeLimiter()
    models = RequestView("GET", "/v1/models", {"authorization": "Bearer k-p0"}, None)
    decision = await decider(limiter).decide(models)
    assert isinstance(decision, Admit) and decision.upstream.set_headers["x-qos-tier"] == "p0"
    assert limiter.calls == []


class Unreachable:
    async def ping(self):
        raise redis.ConnectionError("down")


@pytest.mark.asyncio
async def test_a_lost_redis_is_decided_on_local_budgets_never_admitted_unmetered():
    limiter = ResilientLimiter(FakeLimiter(redis.ConnectionError("down")), Unreachable(), lambda: 1)
    try:
        answers = [await decider(limiter).decide(chat("k-p2")) for _ in range(20)]
    finally:
        await limiter.stop()
    admitted = [answer for answer in answers if isinstance(answer, Admit)]
    # P2's bucket holds 1250 tokens: twelve requests of 104 (a little more if it refilled).
    assert 12 <= len(admitted) < 20
    assert {answer.record.reason for answer in admitted} == {Admitted.ADMITTED}
    shed = {answer.reason for answer in answers if isinstance(answer, Respond)}
    assert shed == {"shed_tier_budget"}


class Shedding:
    """A shedding state whose rules shed the given tiers."""

    def __init__(self, **shed: Reason) -> None:
        self.state = SheddingState()
        for tier, reason in shed.items():
            self.state.shedding[Tier(tier)] = reason

    def __call__(self):
        return self.state


def decider_with(limiter, shedding, mode=None, **config) -> AdmissionDirector:
    snapshot = Snapshot(1, QosConfig.from_partial(config), TENANTS, mode or OperatorMode())
    return AdmissionDirector(
        lambda: snapshot, IdentityResolver(lookup), limiter, estimate, shedding
    )


@pytest.mark.asyncio
async def test_an_overload_shed_answers_without_asking_redis():
    limiter = FakeLimiter()
    shedding = Shedding(p2=Reason.SHED_KV_WATERMARK)
    shed = decider_with(limiter, shedding)
    answer = await shed.decide(chat("k-p2"))
    assert isinstance(answer, Respond)
    assert (answer.status, answer.reason) == (200, "shed_kv_watermark")
    assert answer.headers["retry-after"] == "15"  # nothing foreseen: the tier's longest
    assert limiter.calls == []
    assert isinstance(await shed.decide(chat("k-p0")), Admit)
    assert len(limiter.calls) == 1
    # The watermark foreseen back in 2.4 s: told so.
    shedding.state.recovery[Tier.P2] = 2.4
    foreseen = await shed.decide(chat("k-p2"))
    assert (foreseen.headers["retry-after"], foreseen.headers["retry-after-ms"]) == ("3", "2400")


@pytest.mark.asyncio
async def test_shadow_mode_admits_untouched_and_names_what_it_would_have_done():
    limiter = FakeLimiter()
    shadow = decider_with(
        limiter, Shedding(p2=Reason.SHED_KV_WATERMARK), OperatorMode(mode=Mode.SHADOW)
    )
    answer = await shadow.decide(chat("k-p2", extra_headers={"x-qos-tier": "p0"}))
    assert isinstance(answer, Admit)
    record = answer.record
    assert record.label == "shadow_shed_kv_watermark" and record.tier == "p2"
    assert record.reason is Admitted.SHADOW and record.shadowed is Reason.SHED_KV_WATERMARK
    assert answer.upstream.set_headers["x-qos-tier"] == "p2"
    assert answer.upstream.replace_body is None
    bad = await shadow.decide(RequestView("POST", "/v1/chat/completions", {}, b"{"))
    assert isinstance(bad, Admit) and bad.record.label == "shadow_invalid_request"


def queued_decider(
    limiter, max_concurrency=1, **config
) -> tuple[AdmissionDirector, AdmissionQueue]:
    qos = QosConfig.from_partial({"fleet": {"max_concurrency": max_concurrency}, **config})
    snapshot = Snapshot(1, qos, TENANTS)
    admission = AdmissionQueue(lambda: qos)
    decider = AdmissionDirector(
        lambda: snapshot, IdentityResolver(lookup), limiter, estimate, queue=admission
    )
    return decider, admission


@pytest.mark.asyncio
async def test_with_a_free_slot_the_request_is_admitted_holding_it():
    decider, admission = queued_decider(FakeLimiter())
    decision = await decider.decide(chat("k-p2"))
    assert isinstance(decision, Admit) and decision.record.slot
    assert decision.upstream.slot == decision.record.slot
    assert "x-qos-slot" not in decision.upstream.set_headers  # engines never see it
    assert decision.upstream.set_headers["x-qos-queue-wait-ms"] == "0"
    assert len(admission.slots) == 1


@pytest.mark.asyncio
async def test_without_a_free_slot_the_request_is_held_until_one_frees():
    decider, admission = queued_decider(FakeLimiter())
    first = await decider.decide(chat("k-p0"))
    held = await begin(decider, chat("k-p2"))
    assert held.holds == [2.0]
    await asyncio.sleep(0.01)
    admission.release(first.record.slot)
    final = await held.task
    assert isinstance(final, Admit) and final.record.slot and final.record.tier == "p2"
    assert int(final.upstream.set_headers["x-qos-queue-wait-ms"]) >= 5


@pytest.mark.asyncio
async def test_a_held_request_gets_its_fallback_when_its_wait_runs_out():
    decider, _ = queued_decider(FakeLimiter(), tiers={"p2": {"max_queue_wait_seconds": 0.02}})
    await decider.decide(chat("k-p0"))
    held = await begin(decider, chat("k-p2"))
    final = await held.task
    assert held.held and isinstance(final, Respond)
    assert (final.status, final.reason) == (200, "shed_queue_timeout")


@pytest.mark.asyncio
async def test_a_bucket_that_refills_soon_is_waited_for():
    limiter = RefillsSoon()
    decider, _ = queued_decider(limiter, max_concurrency=5)
    held = await begin(decider, chat("k-p2"))
    assert held.held
    final = await held.task
    assert isinstance(final, Admit) and final.record.slot
    assert len(limiter.calls) == 2
    far = FakeLimiter(Verdict(False, refused=0, retry_after=30.0))  # past P2's 2 s
    decider, _ = queued_decider(far, max_concurrency=5)
    shed = await decider.decide(chat("k-p2"))
    assert isinstance(shed, Respond) and shed.reason == "shed_tier_budget"


@pytest.mark.asyncio
async def test_a_newcomer_waits_behind_those_waiting_for_budget_without_asking_first():
    # P2's bucket refills 250 tokens a second; each request costs 104 (0.42 s of it).
    # The first is told the bucket holds it again in 1.2 s: a second fits in P2's 2 s
    # behind it (1.2 + 0.42), a third (1.2 + 0.83) does not.
    refusing = FakeLimiter(Verdict(False, refused=0, retry_after=1.2))
    decider, _ = queued_decider(
        refusing, max_concurrency=5, fleet={"capacity_tokens_per_second": 5000}
    )
    first = await begin(decider, chat("k-p2"))
    assert first.held  # it now waits for its 104 tokens
    second = await begin(decider, chat("k-p2"))
    assert second.held
    assert len(refusing.calls) == 1  # it did not ask before the one waiting
    third = await decider.decide(chat("k-p2"))
    assert isinstance(third, Respond) and third.reason == "shed_tier_budget"
    assert len(refusing.calls) == 1  # answered at once, from the line's length
    for waiting in (first, second):
        waiting.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting.task
    asked = len(refusing.calls)  # the second asked when its turn came
    fourth = await begin(decider, chat("k-p2"))  # nobody waits any more: it asks
    assert fourth.held and len(refusing.calls) == asked + 1
    await fourth.stop()


@pytest.mark.asyncio
async def test_while_a_line_waits_a_newcomer_dearer_than_the_budget_serves_is_cut():
    # P2's bucket refills 250 tokens a second, 2500 over the 10 s the cutoff looks back.
    refusing = FakeLimiter(Verdict(False, refused=0, retry_after=0.2))
    decider, _ = queued_decider(
        refusing,
        max_concurrency=5,
        fleet={"capacity_tokens_per_second": 5000},
        tiers={"p2": {"max_queue_wait_seconds": 25, "burst_seconds": 6}},
    )

    def costing(tokens: int) -> RequestView:  # 4 characters a token, and 4 per message
        return chat("k-p2", messages=[{"role": "user", "content": "x" * 4 * (tokens - 4)}])

    held = []
    for tokens in (104, 1004, 1004):  # 2112 tokens asked: all fit what refills
        held.append(await begin(decider, costing(tokens)))
        assert held[-1].held
    # 3312 asked: the 2500 serve the 104 and both 1004s; a 1200 is dearer than those.
    dear = await decider.decide(costing(1200))
    assert isinstance(dear, Respond) and dear.reason == "shed_tier_budget"
    cheap = await begin(decider, costing(104))
    assert cheap.held
    assert len(refusing.calls) == 1  # only the first asked: the others found a line
    for waiting in (*held, cheap):
        await waiting.stop()


@pytest.mark.asyncio
async def test_a_tenant_over_its_rate_when_its_turn_comes_is_told_so():
    class TenantEmptiesLater(FakeLimiter):
        async def acquire(self, cost, buckets, load=None, otherwise=None):
            self.calls.append((cost, list(buckets)))
            if len(self.calls) == 1:
                return Verdict(False, refused=buckets[0], retry_after=0.01)
            return Verdict(False, refused=buckets[1], retry_after=0.5)

    decider, _ = queued_decider(TenantEmptiesLater(), max_concurrency=5)
    held = await begin(decider, chat("k-cap", messages=SHORT))
    assert held.held
    final = await held.task
    assert isinstance(final, Respond) and final.reason == "tenant_rate_limited"
    assert final.status == 429 and final.headers["retry-after"] == "1"


@pytest.mark.asyncio
async def test_the_tiers_vllm_priority_replaces_any_the_client_sent():
    decider, _ = queued_decider(FakeLimiter(), max_concurrency=5, engine={"send_priority": True})
    spoof = {"x-vllm-priority": "-100", "x-data-parallel-rank": "1", "x-vllm-future": "1"}
    decision = await decider.decide(chat("k-p2", extra_headers=spoof, priority=-100))
    upstream = decision.upstream
    assert json.loads(upstream.replace_body)["priority"] == 2
    # The header vLLM reads before the body carries the tier's value, not the client's.
    assert upstream.set_headers["x-vllm-priority"] == "2"
    assert "x-vllm-priority" not in upstream.remove_headers
    assert {"x-data-parallel-rank", "x-vllm-future"} <= set(upstream.remove_headers)
    p0 = (await decider.decide(chat("k-p0"))).upstream
    assert json.loads(p0.replace_body)["priority"] == 0
    assert p0.set_headers["x-vllm-priority"] == "0"
    off, _ = queued_decider(FakeLimiter(), max_concurrency=5)
    stripped = (await off.decide(chat("k-p2", extra_headers=spoof, priority=-100))).upstream
    assert "priority" not in json.loads(stripped.replace_body)
    assert "x-vllm-priority" not in stripped.set_headers
    assert set(spoof) <= set(stripped.remove_headers)
    untouched = (await off.decide(chat("k-p2"))).upstream
    assert untouched.replace_body is None
    assert {"x-vllm-priority", "x-data-parallel-rank"} <= set(untouched.remove_headers)


@pytest.mark.asyncio
async def test_engine_headers_are_stripped_on_every_admitted_path():
    spoof = {"x-vllm-priority": "-100", "x-data-parallel-rank": "0"}
    models = RequestView("GET", "/v1/models", {"authorization": "Bearer k-p2", **spoof}, None)
    passed = await decider(FakeLimiter()).decide(models)
    assert isinstance(passed, Admit)
    assert set(spoof) <= set(passed.upstream.remove_headers)
    shadow = decider_with(
        FakeLimiter(), Shedding(p2=Reason.SHED_KV_WATERMARK), OperatorMode(mode=Mode.SHADOW)
    )
    untouched = await shadow.decide(chat("k-p2", extra_headers=spoof))
    assert untouched.record.label == "shadow_shed_kv_watermark"
    assert set(spoof) <= set(untouched.upstream.remove_headers)


@pytest.mark.asyncio
async def test_streamed_answers_are_sampled_for_their_first_token_time():
    decider, _ = queued_decider(FakeLimiter(), max_concurrency=9, slo={"ttft_sample_rate": 1.0})
    assert decider.watch_response({}).sampled
    watched = dataclasses.replace(chat("k-p2", stream=True), response_watched=True)
    assert (await decider.decide(watched)).record.time_first_byte
    unasked = await decider.decide(chat("k-p2", stream=True))
    assert not unasked.record.time_first_byte  # not asked
    whole = dataclasses.replace(chat("k-p2"), response_watched=True)
    assert not (await decider.decide(whole)).record.time_first_byte  # nothing to time
    never, _ = queued_decider(FakeLimiter(), max_concurrency=9, slo={"ttft_sample_rate": 0.0})
    assert not any(never.watch_response({}) for _ in range(100))
    capped, _ = queued_decider(
        FakeLimiter(), slo={"ttft_sample_rate": 1.0, "ttft_samples_per_second": 5}
    )
    assert sum(capped.watch_response({}).sampled for _ in range(100)) == 5  # within a second


@pytest.mark.asyncio
async def test_an_admission_counts_what_it_reserved_not_the_whole_it_asked():
    # The capped tenant's bucket holds 50 tokens: its 14-token prompt and 200 tokens of
    # output (214) reserve 50, and owe the rest when the answer is settled.
    limiter = FakeLimiter()
    charging = decider(limiter, tiers={"p1": {"output_weight": 1.0}})
    admitted = await charging.decide(chat("k-cap", messages=SHORT, max_tokens=200))
    assert isinstance(admitted, Admit)
    assert admitted.record.cost == pytest.approx(50)
    assert limiter.calls[0][0] == pytest.approx(50)
