"""The flash sale's mix made to fit a real engine: pure functions, no servers."""

from __future__ import annotations

import pytest

from sidecar.tooling.benchmarks.fleet import TEMPLATE_TOKENS, mocks, scale_for, scaled
from sidecar.tooling.benchmarks.traffic import CALLERS, capacity_rps, plan


@pytest.mark.parametrize("max_model_len", [512, 2048, 4096, 40_000])
def test_the_longest_scaled_prompt_and_its_answer_fit_one_sequence(max_model_len):
    factor = scale_for(max_model_len)
    callers = scaled(CALLERS, factor)
    longest = max(r.prompt_tokens for r in plan(50, 200, seed=4, callers=callers))
    answer = max(c.max_tokens for c in callers)
    assert longest + answer + TEMPLATE_TOKENS <= max_model_len
    if factor > 1:  # and no more shortening than that takes
        less = max(c.very_long_range[1] for c in scaled(CALLERS, factor - 1))
        assert less + answer + TEMPLATE_TOKENS > max_model_len


def test_scaling_shortens_prompts_and_keeps_shares_and_answers():
    callers = scaled(CALLERS, 10)
    for before, after in zip(CALLERS, callers, strict=True):
        assert (after.tier, after.share, after.max_tokens) == (
            before.tier,
            before.share,
            before.max_tokens,
        )
        assert after.mean_prompt() == pytest.approx(before.mean_prompt() / 10, rel=0.01)
        assert after.very_long_share == before.very_long_share
    assert scaled(CALLERS, 1) == CALLERS


def test_the_mocks_capacity_is_their_prefill_rate():
    fleet = mocks(replicas=2, time_scale=0.5, chunked=False)
    assert fleet.engines is None and fleet.stack_overrides == {} and fleet.sidecar_args == ()
    assert fleet.capacity_tokens_per_second == pytest.approx(2 * 16_384 / 0.5)
    assert fleet.capacity_rps == pytest.approx(capacity_rps(2 * 16_384 / 0.5))
    assert fleet.name == "2 mock GPUs" and "unchunked" in fleet.detail
