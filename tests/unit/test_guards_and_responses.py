from __future__ import annotations

import json

import pytest

from sidecar.config.base import FallbackKind
from sidecar.config.schema import QosConfig, TierConfig
from sidecar.refusals import Reason, Refusal
from sidecar.request.answers.openai import FINISH_REASON
from sidecar.request.answers.refusal import respond
from sidecar.request.bodies.limits import InvalidRequest
from sidecar.request.bodies.openai import read_chat, read_completions
from sidecar.request.bodies.parsed import ParsedRequest, ResponseShape, TextForm
from sidecar.request.policy.cost import price
from sidecar.request.policy.guards import apply_guards

P0 = QosConfig().tiers.p0
P2 = QosConfig().tiers.p2


def chat(**fields) -> ParsedRequest:
    return read_chat({"messages": [{"role": "user", "content": "hi"}], **fields})


def test_p0_output_is_capped_when_absent_or_above_the_cap():
    assert apply_guards(chat(), P0, "p0", 10)["max_tokens"] == 512
    assert apply_guards(chat(max_tokens=4000), P0, "p0", 10)["max_tokens"] == 512
    both = apply_guards(chat(max_tokens=4000, max_completion_tokens=9000), P0, "p0", 10)
    assert (both["max_tokens"], both["max_completion_tokens"]) == (512, 512)
    assert apply_guards(chat(max_tokens=100), P0, "p0", 10) is None  # under the cap
    assert apply_guards(chat(max_tokens=4000), P2, "p2", 10) is None  # no cap on P2


def test_p0_output_cap_is_the_requests_total_over_every_answer_asked_for():
    # n answers share the cap: the engine never decodes more than 512 tokens in all.
    assert apply_guards(chat(n=64, max_tokens=512), P0, "p0", 10)["max_tokens"] == 8
    assert apply_guards(chat(n=4), P0, "p0", 10)["max_tokens"] == 128
    assert apply_guards(chat(n=3, best_of=5, max_tokens=512), P0, "p0", 10)["max_tokens"] == 102
    listed = read_completions({"prompt": ["a", "b"], "n": 2, "max_tokens": 512})
    assert apply_guards(listed, P0, "p0", 10)["max_tokens"] == 128
    with pytest.raises(Refusal) as refused:
        apply_guards(chat(n=600), P0, "p0", 10)
    assert (refused.value.reason, refused.value.param) == (Reason.INVALID_REQUEST, "n")
    assert "600 answers" in refused.value.message


def test_every_answer_asked_for_is_reserved():
    tier = P2.model_copy(update={"expected_output_tokens": 100, "max_tokens_cap": None})
    assert price(tier, 10, chat(n=64, max_tokens=50).output).expected_output == 64 * 50
    assert price(tier, 10, chat(n=2).output).expected_output == 200
    assert price(P0, 10, chat(n=64, max_tokens=512).output).expected_output == 512
    with pytest.raises(InvalidRequest):
        chat(n=0)


def test_long_prompts_are_refused_for_the_tier_that_limits_them():
    with pytest.raises(Refusal) as refused:
        apply_guards(chat(), P0, "p0", 5000)
    assert refused.value.reason is Reason.PROMPT_TOO_LONG
    assert "5000" in refused.value.message and "4096" in refused.value.message
    assert apply_guards(chat(), P2, "p2", 50_000) is None


SHED = Refusal(Reason.SHED_TIER_BUDGET, "budget", retry_after=0.2)


@pytest.mark.parametrize("form", [TextForm.CHAT, TextForm.COMPLETION])
def test_shed_fallback_is_a_whole_completion(form):
    answer = respond(SHED, ResponseShape(text=form, model="m"), P2, "p2")
    body = json.loads(answer.body)
    assert answer.status == 200
    # Back when its bucket has refilled (0.2 s), in whole seconds and in milliseconds.
    assert (answer.headers["retry-after"], answer.headers["retry-after-ms"]) == ("1", "200")
    assert answer.headers["x-qos-decision"] == "shed_tier_budget"
    assert answer.headers["content-type"] == "application/json"
    assert body["object"] == ("chat.completion" if form is TextForm.CHAT else "text_completion")
    assert body["choices"][0]["finish_reason"] == FINISH_REASON
    assert body["model"] == "m"
    text = body["choices"][0].get("text") or body["choices"][0]["message"]["content"]
    assert "retry in 1 s" in text


def test_streamed_fallback_is_one_chunk_then_done():
    shape = ResponseShape(text=TextForm.CHAT, stream=True, include_usage=True)
    answer = respond(SHED, shape, P2, "p2")
    events = answer.body.decode().split("\n\n")
    assert answer.headers["content-type"] == "text/event-stream"
    assert events[1:] == ["data: [DONE]", ""]
    chunk = json.loads(events[0].removeprefix("data: "))
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"][0]["delta"]["role"] == "assistant"
    assert chunk["usage"]["total_tokens"] == 0


def test_tiers_preferring_errors_get_a_429_error_object():
    tier = TierConfig(share=0.05, fallback=FallbackKind.ERROR, retry_after_seconds=30)
    unforeseen = Refusal(Reason.SHED_CORE_ONLY, "core-only")
    answer = respond(unforeseen, ResponseShape(text=TextForm.CHAT), tier, "p2")
    assert answer.status == 429
    assert answer.headers["retry-after"] == "30"  # nothing foreseen: the tier's longest
    error = json.loads(answer.body)["error"]
    assert error["code"] == "load_shedding" and "retry in 30 s" in error["message"]


@pytest.mark.parametrize(
    ("foreseen", "told_ms"),
    [(None, 15_000), (2.5, 2_500), (0.001, 50), (90.0, 15_000)],
)
def test_a_shed_is_told_to_come_back_when_its_tier_is_foreseen_back(foreseen, told_ms):
    """Within [50 ms, the tier's retry_after_seconds]; the latter where nothing is
    foreseen."""
    refusal = Refusal(Reason.SHED_KV_WATERMARK, "watermark", retry_after=foreseen)
    answer = respond(refusal, ResponseShape(text=TextForm.CHAT), P2, "p2")
    assert answer.headers["retry-after-ms"] == str(told_ms)
    assert answer.headers["retry-after"] == str(-(-told_ms // 1000))


def test_errors_carry_their_status_reason_and_retry_after():
    limited = respond(
        Refusal(Reason.TENANT_RATE_LIMITED, "slow down", retry_after=1.2),
        ResponseShape(text=TextForm.CHAT),
        P2,
        "p2",
    )
    assert (limited.status, limited.headers["retry-after"]) == (429, "2")
    assert limited.headers["retry-after-ms"] == "1200"
    unauth = respond(Refusal(Reason.UNAUTHENTICATED, "key please"), None, None)
    assert unauth.status == 401 and unauth.headers["www-authenticate"] == "Bearer"
    assert json.loads(unauth.body)["error"]["code"] == "invalid_api_key"
    bad = respond(Refusal(Reason.INVALID_REQUEST, "no", param="messages"), None, None)
    assert bad.status == 400 and "retry-after" not in bad.headers
    assert json.loads(bad.body)["error"] == {
        "message": "no",
        "type": "invalid_request_error",
        "param": "messages",
        "code": None,
    }
    assert bad.headers["x-qos-decision"] == "invalid_request"
