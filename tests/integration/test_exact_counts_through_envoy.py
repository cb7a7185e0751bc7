"""Exact counts through real Envoy: a sidecar given the model's tokenizer files
(--tokenizer-file, the chat template beside it) charges the prompt its template renders,
tool calls included, and the same conversation costs the same whichever API it came by.
The tier's prompt cap shows the count: it refuses with the number it counted."""

from __future__ import annotations

import json
import re

import anthropic
import openai
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from tests.integration.helpers import stack_with_tenant

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY = "exact-p0"
# Every whitespace-separated word is one token of this model.
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %} {{ m['role'] }} {{ m['content'] }}"
    "{% if m['tool_calls'] is defined %}{% for c in m['tool_calls'] %}"
    " {{ c['function']['name'] }} {{ c['function']['arguments'] | tojson }}"
    "{% endfor %}{% endif %}{% endfor %}"
)
NOTE = " ".join(f"w{i}" for i in range(40))
# <s>, user, where, is, it, assistant, track, {"note":, then the note's 40 words.
RENDERED_TOKENS = 8 + 40


@pytest.fixture(scope="module")
def exact_stack(tmp_path_factory):
    model = tmp_path_factory.mktemp("model")
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(model / "tokenizer.json"))
    config = {"bos_token": "<s>", "chat_template": TEMPLATE}
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    with stack_with_tenant(
        tmp_path_factory.mktemp("exact-stack"),
        "exact",
        "p0",
        KEY,
        sidecar_args=("--tokenizer-file", str(model / "tokenizer.json")),
    ) as stack:
        stack.config.set({"tiers": {"p0": {"max_prompt_tokens": 10}}})
        yield stack


def counted(message: str) -> int:
    found = re.search(r"This prompt has about (\d+) tokens", message)
    assert found, message
    return int(found.group(1))


async def test_a_tool_call_costs_its_rendered_tokens_in_chat_and_in_messages(exact_stack):
    asked = {"role": "user", "content": "where is it"}
    call = {"id": "c1", "type": "function", "function": {"name": "track", "arguments": ""}}
    call["function"]["arguments"] = json.dumps({"note": NOTE})
    async with openai.AsyncOpenAI(
        base_url=f"{exact_stack.envoy_url}/v1", api_key=KEY, max_retries=0
    ) as client:
        with pytest.raises(openai.BadRequestError) as chat_refused:
            await client.chat.completions.create(
                model="mock-llm",
                messages=[asked, {"role": "assistant", "content": None, "tool_calls": [call]}],
                max_tokens=8,
            )
    async with anthropic.AsyncAnthropic(
        base_url=exact_stack.envoy_url, api_key=KEY, max_retries=0
    ) as client:
        use = {"type": "tool_use", "id": "c1", "name": "track", "input": {"note": NOTE}}
        with pytest.raises(anthropic.BadRequestError) as messages_refused:
            await client.messages.create(
                model="mock-llm",
                messages=[asked, {"role": "assistant", "content": [use]}],
                max_tokens=8,
            )
    assert counted(chat_refused.value.message) == RENDERED_TOKENS
    assert counted(messages_refused.value.message) == RENDERED_TOKENS


async def test_long_words_are_few_tokens_of_this_model_and_admitted(exact_stack):
    # <s>, user and two words: 4 tokens, under the cap of 10; estimated from their 63
    # characters they would be 20, and refused.
    words = "supercalifragilisticexpialidocious antidisestablishmentarianism"
    async with openai.AsyncOpenAI(
        base_url=f"{exact_stack.envoy_url}/v1", api_key=KEY, max_retries=0
    ) as client:
        answer = await client.chat.completions.create(
            model="mock-llm", messages=[{"role": "user", "content": words}], max_tokens=4
        )
    assert answer.choices[0].message.content
