"""Output settlement without servers: what a request reserves, and how far the estimate of
a stream's tokens from its size is from the truth, on the mock's and vLLM's shapes."""

from __future__ import annotations

import random

import pytest

from sidecar.config.schema import QosConfig
from sidecar.request.bodies.parsed import OutputLimit
from sidecar.request.completion.usage import streamed_output_tokens
from sidecar.request.policy.cost import price
from sidecar.routes.kinds import RouteKind
from sidecar.tooling.mockvllm.engine import _VOCABULARY
from sidecar.tooling.mockvllm.openai_shapes import SSE_DONE, ResponseShaper

TIERS = QosConfig.from_partial(
    {"tiers": {"p1": {"output_weight": 2.0, "expected_output_tokens": 300}}}
).tiers


def asking(max_tokens: int | None) -> OutputLimit:
    return OutputLimit((("max_tokens",),), max_tokens, ("max_tokens",))


def test_a_request_reserves_what_it_asked_for_or_the_tier_s_expected_output():
    asked = price(TIERS.p1, prompt_tokens=20, output=asking(2000))
    assert asked.reserved == 20 * 1.0 + 2000 * 2.0
    unsaid = price(TIERS.p1, prompt_tokens=20, output=asking(None))
    assert unsaid.expected_output == 300
    capped = price(TIERS.p0, prompt_tokens=20, output=asking(2000))  # P0's cap: 512
    assert capped.expected_output == 512 and capped.reserved == 20  # P0's output is free
    # Settled: a shorter answer gives back, a longer one owes; a prompt count corrects.
    assert asked.difference(None, 1500) == -500 * 2.0
    assert unsaid.difference(25, 400) == 5 + 100 * 2.0


def stream(endpoint: RouteKind, model: str, tokens: int, rng: random.Random) -> bytes:
    shaper = ResponseShaper(endpoint, model)
    chunks = [shaper.chunk(None, first=True)] if endpoint is RouteKind.CHAT else []
    for index in range(tokens):
        finish = "length" if index == tokens - 1 else None
        chunks.append(shaper.chunk(rng.choice(_VOCABULARY), finish))
    return b"".join(chunks) + SSE_DONE


@pytest.mark.parametrize("endpoint", [RouteKind.CHAT, RouteKind.COMPLETIONS])
@pytest.mark.parametrize("model", ["mock-llm", "Qwen/Qwen2.5-72B-Instruct"])
def test_a_stream_s_tokens_are_estimated_from_its_size_within_a_few_percent(endpoint, model):
    rng = random.Random(5)
    for tokens in (50, 500, 2000):
        size = len(stream(endpoint, model, tokens, rng))
        estimate = streamed_output_tokens(size, endpoint is RouteKind.CHAT, model)
        assert abs(estimate - tokens) / tokens < 0.03, (tokens, estimate)
    assert streamed_output_tokens(0, True, model) == 0
