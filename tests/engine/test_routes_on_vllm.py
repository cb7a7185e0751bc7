"""The generation routes the route table charges, through Envoy and the sidecar to vLLM
itself, with the official clients: each is admitted, answered by vLLM whole and streamed,
and settled from the usage vLLM sent on that route's own API."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.engine.engine_client import until
from tests.engine.stacks import LOAD_SOURCES, stack_in_front
from tests.integration.helpers import p1_in_flight, settlement_counts

pytestmark = [pytest.mark.engine, pytest.mark.integration, pytest.mark.asyncio]

KEY = "vllm-routes-p1"
ANSWER_TOKENS = 24  # the tiny model never ends early: every answer is this long
QUESTION = [{"role": "user", "content": "Where is my order?"}]


@pytest.fixture(params=LOAD_SOURCES)
def route_stack(request, idle_engine, tmp_path):
    config = {"tiers": {"p1": {"output_weight": 1.0}}}
    with stack_in_front(idle_engine, tmp_path, request.param, {"r": ("p1", KEY)}, config) as stack:
        yield stack


# Asked of the chat and completions routes: what each sends, whole and streamed.
CHAT = {"messages": QUESTION, "max_tokens": ANSWER_TOKENS}
COMPLETION = {"prompt": "Where is my order?", "max_tokens": ANSWER_TOKENS}
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


async def chat_whole(client: openai.AsyncOpenAI, model: str) -> int:
    answer = await client.chat.completions.create(model=model, **CHAT)
    return answer.usage.completion_tokens


async def chat_streamed(client: openai.AsyncOpenAI, model: str) -> int:
    stream = await client.chat.completions.create(model=model, **CHAT, **STREAMED)
    return [chunk async for chunk in stream][-1].usage.completion_tokens


async def completion_whole(client: openai.AsyncOpenAI, model: str) -> int:
    answer = await client.completions.create(model=model, **COMPLETION)
    return answer.usage.completion_tokens


async def completion_streamed(client: openai.AsyncOpenAI, model: str) -> int:
    stream = await client.completions.create(model=model, **COMPLETION, **STREAMED)
    return [chunk async for chunk in stream][-1].usage.completion_tokens


async def responses_whole(client: openai.AsyncOpenAI, model: str) -> int:
    answer = await client.responses.create(
        model=model, input="Where is my order?", max_output_tokens=ANSWER_TOKENS
    )
    assert answer.output_text
    return answer.usage.output_tokens


async def responses_streamed(client: openai.AsyncOpenAI, model: str) -> int:
    stream = await client.responses.create(
        model=model, input="Where is my order?", max_output_tokens=ANSWER_TOKENS, stream=True
    )
    events = [event async for event in stream]
    assert events[0].type == "response.created"
    return events[-1].response.usage.output_tokens


async def messages_whole(client: anthropic.AsyncAnthropic, model: str) -> int:
    answer = await client.messages.create(model=model, messages=QUESTION, max_tokens=ANSWER_TOKENS)
    assert answer.stop_reason == "max_tokens"
    return answer.usage.output_tokens


async def messages_streamed(client: anthropic.AsyncAnthropic, model: str) -> int:
    async with client.messages.stream(
        model=model, messages=QUESTION, max_tokens=ANSWER_TOKENS
    ) as stream:
        final = await stream.get_final_message()
    return final.usage.output_tokens


OPENAI_CALLS = [
    chat_whole,
    chat_streamed,
    completion_whole,
    completion_streamed,
    responses_whole,
    responses_streamed,
]
ANTHROPIC_CALLS = [messages_whole, messages_streamed]


@pytest.mark.timeout(300)
async def test_every_generation_route_is_answered_and_settled_from_its_usage(
    route_stack, idle_engine
):
    model = idle_engine.settings.served_model
    async with (
        openai.AsyncOpenAI(
            base_url=f"{route_stack.envoy_url}/v1", api_key=KEY, max_retries=0
        ) as openai_client,
        anthropic.AsyncAnthropic(
            base_url=route_stack.envoy_url, api_key=KEY, max_retries=0
        ) as anthropic_client,
    ):
        calls = [(openai_client, c) for c in OPENAI_CALLS]
        calls += [(anthropic_client, c) for c in ANTHROPIC_CALLS]
        for client, call in calls:
            before = settlement_counts(route_stack)
            tokens = await call(client, model)
            assert tokens == ANSWER_TOKENS, call.__name__
            await until(
                lambda b=before: settlement_counts(route_stack)[1] == b[1] + ANSWER_TOKENS,
                30,
                f"{call.__name__} settled",
            )
            settled = settlement_counts(route_stack)
            # Reserved what it asked for, settled all of it from vLLM's usage, none guessed.
            assert settled[0] == before[0] + ANSWER_TOKENS, call.__name__
            assert settled[2] == before[2], call.__name__
    await until(lambda: p1_in_flight(route_stack) == 0, 30, "every slot given back")
