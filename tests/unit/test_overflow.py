"""Overflow without servers: which pools a shed request may go to, how it is rewritten
and charged there, and when it may not go at all."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from sidecar.config.base import Tier, describe
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.loops.overload.shedding import SheddingState
from sidecar.refusals import Reason
from sidecar.request.admission.candidates import OVERFLOW_HEADER, SUBSTITUTE_HEADER
from sidecar.request.admission.director import AdmissionDirector
from sidecar.request.admission.identity import IdentityResolver
from sidecar.request.bodies.tokens import estimate
from sidecar.request.limiter.buckets import Verdict
from sidecar.request.policy.decision import Admit, RequestView, Respond
from sidecar.request.queueing.queue import AdmissionQueue
from tests.unit.test_admission_decider import TENANTS, FakeLimiter, lookup, named

BIG_AND_SMALL = {
    "pools": {
        "big": {
            "models": ["qwen-72b"],
            "tiers": {"p1": {"overflow": ["small"]}, "p2": {"overflow": ["small"]}},
        },
        "small": {
            "models": ["llama-8b", "small"],
            "max_model_len": 2_000,
            "tiers": {"p1": {"max_tokens_cap": 64}},
        },
    }
}


def refused(document: dict) -> str:
    with pytest.raises(ValidationError) as error:
        QosConfig.from_partial(document)
    return describe(error.value)


@pytest.mark.parametrize(
    ("pools", "named"),
    [
        ({"a": {"models": ["m"], "tiers": {"p1": {"overflow": ["nowhere"]}}}}, "no pool"),
        ({"a": {"models": ["m"], "tiers": {"p1": {"overflow": ["a"]}}}}, "itself"),
        (
            {"a": {"models": ["m"], "tiers": {"p1": {"overflow": ["b"]}}}, "b": {"models": ["n"]}},
            "max_model_len",
        ),
    ],
)
def test_an_overflow_to_no_pool_itself_or_a_pool_of_unknown_context_is_refused(pools, named):
    message = refused({"pools": pools})
    assert "pools.a.tiers.p1.overflow" in message and named in message


def test_overflow_without_pools_is_refused():
    assert "under pools" in refused({"tiers": {"p1": {"overflow": ["b"]}}})


class BigIsFull(SheddingState):
    """The big pool sheds P1 and P2 for its KV cache; the small one sheds nothing."""

    def for_pool(self, pool: str) -> SheddingState:
        state = SheddingState()
        if pool == "big":
            state.shedding[Tier.P1] = state.shedding[Tier.P2] = Reason.SHED_KV_WATERMARK
        return state


def decider(limiter: FakeLimiter, shedding=BigIsFull, **config) -> AdmissionDirector:
    qos = QosConfig.from_partial({**BIG_AND_SMALL, **config})
    snapshot = Snapshot(1, qos, TENANTS)
    return AdmissionDirector(
        lambda: snapshot,
        IdentityResolver(lookup),
        limiter,
        estimate,
        shedding=shedding,
        queue=AdmissionQueue(lambda: qos),
    )


def chat(tokens: int = 40, headers: dict | None = None, **body) -> RequestView:
    content = "x" * 4 * (tokens - 4)  # 4 characters a token, and 4 tokens a message
    payload = {"model": "qwen-72b", "messages": [{"role": "user", "content": content}], **body}
    all_headers = {"authorization": "Bearer k-cap", **(headers or {})}  # a P1 tenant
    return RequestView("POST", "/v1/chat/completions", all_headers, json.dumps(payload).encode())


@pytest.mark.asyncio
async def test_a_request_shed_for_its_pools_load_is_admitted_by_the_smaller_model():
    limiter = FakeLimiter()
    decision = await decider(limiter).decide(chat(max_tokens=500))
    assert isinstance(decision, Admit) and decision.record.pool == "small"
    assert decision.record.overflowed_from == "big"
    upstream = decision.upstream
    assert upstream.set_headers["x-qos-pool"] == "small"
    assert upstream.set_headers[OVERFLOW_HEADER] == ("small; from=big; reason=shed_kv_watermark")
    body = json.loads(upstream.replace_body)
    assert body["model"] == "llama-8b" and body["max_tokens"] == 64  # small's P1 cap
    ((cost, buckets),) = limiter.calls  # one budget call: the small pool's, as priced there
    assert cost == 40  # the capped tenant's bucket holds 50
    assert [bucket.key for bucket in buckets] == [
        "qos:{bucket-p1}:tier:pool:small",
        "qos:{bucket-p1}:tenant:capped",
    ]


@pytest.mark.asyncio
async def test_no_overflow_for_a_client_that_says_no_or_a_prompt_the_model_cannot_take():
    limiter = FakeLimiter()
    shed = await decider(limiter).decide(chat(headers={SUBSTITUTE_HEADER: "no"}))
    assert isinstance(shed, Respond) and shed.reason == "shed_kv_watermark"
    assert shed.pool == "big"
    too_long = await decider(limiter).decide(chat(1_950, max_tokens=100))  # 2 050 > 2 000
    assert isinstance(too_long, Respond) and too_long.reason == "shed_kv_watermark"
    assert limiter.calls == []  # neither was charged anywhere
    bad = await decider(limiter).decide(chat(headers={SUBSTITUTE_HEADER: "maybe"}))
    assert isinstance(bad, Respond) and (bad.status, bad.reason) == (400, "invalid_request")


@pytest.mark.asyncio
async def test_one_hop_at_most_and_the_first_pools_refusal_when_none_admits():
    class BothFull(SheddingState):
        def for_pool(self, pool: str) -> SheddingState:
            state = SheddingState()
            state.shedding[Tier.P1] = Reason.SHED_KV_WATERMARK
            state.shedding[Tier.P2] = Reason.SHED_NO_REPORTS
            return state

    limiter = FakeLimiter()
    shed = await decider(limiter, BothFull).decide(chat())
    assert isinstance(shed, Respond) and (shed.reason, shed.pool) == ("shed_kv_watermark", "big")
    # The small pool overflowing back to the big one is never tried from an overflow.
    looped = {
        "pools": {
            **BIG_AND_SMALL["pools"],
            "small": {
                **BIG_AND_SMALL["pools"]["small"],
                "tiers": {"p1": {"overflow": ["big"]}},
            },
            "big": {**BIG_AND_SMALL["pools"]["big"], "max_model_len": 8_000},
        }
    }
    shed = await decider(limiter, BothFull, **looped).decide(chat())
    assert isinstance(shed, Respond) and shed.pool == "big"
    assert limiter.calls == []


@pytest.mark.asyncio
async def test_a_pool_without_overflow_sheds_as_before():
    limiter = FakeLimiter()
    plain = {"pools": {"big": {"models": ["qwen-72b"]}, "small": {"models": ["llama-8b"]}}}
    shed = await decider(limiter, **plain).decide(chat())
    assert isinstance(shed, Respond) and shed.reason == "shed_kv_watermark"
    assert limiter.calls == []


class OneCall(FakeLimiter):
    """Answers as the script does with another pool's budgets offered: `home` for the
    first set; with an alternative, `there` (elsewhere: True or False)."""

    def __init__(self, home: Verdict, there: Verdict | None) -> None:
        super().__init__(home)
        self.there = there
        self.offered = []

    async def acquire(self, cost, buckets, load=None, otherwise=None):
        self.calls.append((cost, list(buckets)))
        self.offered.append(otherwise)
        if otherwise is not None and self.there is not None:
            return self.there
        return named(self.verdict, buckets)


SHORT_AT_HOME = Verdict(False, refused=0, retry_after=30.0)


@pytest.mark.asyncio
async def test_a_budget_shed_is_taken_from_the_other_pools_budgets_in_the_same_call():
    limiter = OneCall(SHORT_AT_HOME, Verdict(True, remaining=80.0, elsewhere=True))
    decision = await decider(limiter, SheddingState).decide(chat())
    assert isinstance(decision, Admit) and decision.record.pool == "small"
    told = decision.upstream.set_headers[OVERFLOW_HEADER]
    assert told == "small; from=big; reason=shed_tier_budget"
    assert len(limiter.calls) == 1  # one Redis call decided both pools
    (offered,) = limiter.offered
    assert offered.buckets[0].key == "qos:{bucket-p1}:tier:pool:small"
    assert offered.beyond == 5.0  # P1's wait: a shorter refusal is waited for at home


@pytest.mark.asyncio
async def test_when_the_other_pool_refuses_in_the_same_call_it_is_not_asked_again():
    limiter = OneCall(SHORT_AT_HOME, Verdict(False, retry_after=30.0, elsewhere=False))
    shed = await decider(limiter, SheddingState).decide(chat())
    assert isinstance(shed, Respond) and (shed.reason, shed.pool) == ("shed_tier_budget", "big")
    assert len(limiter.calls) == 1


@pytest.mark.asyncio
async def test_a_limiter_that_cannot_offer_is_asked_once_more_for_the_other_pool():
    class TwoCalls(FakeLimiter):  # takes no alternative: home short, the small pool not
        async def acquire(self, cost, buckets, load=None, otherwise=None):
            self.calls.append((cost, list(buckets)))
            return Verdict(True) if len(self.calls) > 1 else named(SHORT_AT_HOME, buckets)

    limiter = TwoCalls()
    decision = await decider(limiter, SheddingState).decide(chat())
    assert isinstance(decision, Admit) and decision.record.pool == "small"
    assert [calls[1][0].key for calls in limiter.calls] == [
        "qos:{bucket-p1}:tier:pool:big",
        "qos:{bucket-p1}:tier:pool:small",
    ]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/embeddings", {"input": "where is my order"}),
        ("/v1/completions", {"prompt": [101, 2023, 2003], "max_tokens": 5}),
        (
            "/v1/chat/completions",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "what is this"},
                            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                        ],
                    }
                ]
            },
        ),
        ("/v1/responses", {"input": "and then?", "previous_response_id": "resp_1"}),
    ],
)
async def test_only_text_from_text_overflows(path, body):
    limiter = FakeLimiter()
    payload = json.dumps({"model": "qwen-72b", **body}).encode()
    view = RequestView("POST", path, {"authorization": "Bearer k-cap"}, payload)
    shed = await decider(limiter).decide(view)
    assert isinstance(shed, Respond) and shed.reason == "shed_kv_watermark"
    assert shed.pool == "big" and limiter.calls == []


@pytest.mark.asyncio
async def test_a_structured_output_overflows_where_the_other_pool_takes_its_size():
    """An ordinary structured output goes with the request; one past the other pool's
    size, or anything else beyond a prompt of text, stays in its own pool."""
    big_takes_all = {"allowed": ["large_grammars", "vllm_xargs"], "grammar_max_bytes": 16384}
    pools = json.loads(json.dumps(BIG_AND_SMALL["pools"]))
    pools["big"]["extras"] = big_takes_all
    schema = {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}}
    small = await decider(FakeLimiter(), pools=pools).decide(chat(response_format=schema))
    assert isinstance(small, Admit) and small.record.pool == "small"
    large = {"grammar": "root ::= " + "x" * 20_000}
    for body in ({"structured_outputs": large}, {"vllm_xargs": {"steps": 3}}):
        limiter = FakeLimiter()
        shed = await decider(limiter, pools=pools).decide(chat(**body))
        assert isinstance(shed, Respond) and shed.reason == "shed_kv_watermark", body
        assert shed.pool == "big" and limiter.calls == []
