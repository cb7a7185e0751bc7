"""Fields beyond a prompt of text, through real Envoy with the official clients: refused
in each API's own shape unless the configuration allows them, nothing reaching the
engine; allowed, prompt embeddings are charged a token a row and P0's output cap holds
over every prompt they add."""

from __future__ import annotations

import contextlib
from pathlib import Path

import anthropic
import openai
import pytest

from tests.integration.helpers import scrape, stack_with_tenants
from tests.integration.stand_in_picker import generated

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

EMBEDS = Path(__file__).resolve().parent.parent / "fixtures" / "prompt_embeds"
P0_KEY, P1_KEY = "sk-extras-p0", "sk-extras-p1"
CAP = 512


def embeds(name: str) -> str:
    return (EMBEDS / f"{name}.b64").read_text().strip()


def admitted_cost(stack, route: str, tier: str) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return samples.get(f'qos_admitted_cost_tokens_total{{route="{route}",tier="{tier}"}}', 0.0)


@pytest.mark.timeout(120)
async def test_extras_are_refused_in_each_apis_shape_unless_allowed_then_charged(tmp_path):
    tenants = {"pay": ("p0", P0_KEY), "core": ("p1", P1_KEY)}
    with stack_with_tenants(tmp_path, tenants, replicas=1) as stack:
        async with contextlib.AsyncExitStack() as clients:
            await refused_unless_allowed(stack, clients)
            await charged_when_allowed(stack, clients)


async def refused_unless_allowed(stack, clients: contextlib.AsyncExitStack) -> None:
    engine = stack.engine_urls[0]
    made = generated(engine)
    oa = openai.AsyncOpenAI(base_url=f"{stack.envoy_url}/v1", api_key=P1_KEY, max_retries=0)
    an = anthropic.AsyncAnthropic(base_url=stack.envoy_url, api_key=P1_KEY, max_retries=0)
    await clients.enter_async_context(oa)
    await clients.enter_async_context(an)
    with pytest.raises(openai.BadRequestError) as refused:
        await oa.completions.create(
            model="mock-llm",
            prompt="hi",
            max_tokens=8,
            extra_body={"prompt_embeds": embeds("sparse_4000x8")},
        )
    assert refused.value.status_code == 400
    assert refused.value.body["param"] == "prompt_embeds", refused.value.body
    assert "prompt embeddings" in refused.value.body["message"]
    with pytest.raises(openai.BadRequestError) as refused:
        await oa.chat.completions.create(
            model="mock-llm",
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"vllm_xargs": {"steps": 9}, "chat_template": "{{ messages }}"},
        )
    assert refused.value.body["param"] in ("vllm_xargs", "chat_template")
    with pytest.raises(anthropic.BadRequestError) as told:
        await an.messages.create(
            model="mock-llm",
            max_tokens=8,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"kv_transfer_params": {"do_remote_prefill": True}},
        )
    assert told.value.body["type"] == "error", told.value.body
    assert told.value.body["error"]["type"] == "invalid_request_error"
    assert "kv_transfer_params" in told.value.body["error"]["message"]
    assert generated(engine) == made  # none of them reached the engine


async def charged_when_allowed(stack, clients: contextlib.AsyncExitStack) -> None:
    stack.config.set(
        {
            "extras": {"allowed": ["prompt_embeds"]},
            "tiers": {"p0": {"max_tokens_cap": CAP, "output_weight": 0.0}},
        }
    )
    before = admitted_cost(stack, "completions", "p0")
    pay = openai.AsyncOpenAI(base_url=f"{stack.envoy_url}/v1", api_key=P0_KEY, max_retries=0)
    await clients.enter_async_context(pay)
    # A prompt and 40 more as embeddings: 41 prompts, each answered.
    answer = await pay.completions.create(
        model="mock-llm",
        prompt="hi",
        max_tokens=CAP,
        extra_body={"prompt_embeds": [embeds("batch_1x6x8_half")] * 40, "ignore_eos": True},
    )
    assert len(answer.choices) == 41
    assert answer.usage is not None and answer.usage.completion_tokens <= CAP
    assert answer.usage.completion_tokens == 41 * (CAP // 41)
    # Charged its rows: 40 tensors of 6 and the prompt's one token.
    assert admitted_cost(stack, "completions", "p0") - before == 40 * 6 + 1
