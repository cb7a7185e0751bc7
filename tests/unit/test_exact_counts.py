"""Exact counts: a chat template rendered as the engine renders it, then tokenized. The
engine tests hold them equal to vLLM's own counts; these hold the rendering's parts."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from sidecar.request.bodies.read import read
from sidecar.request.counting.chat_form import from_messages, from_responses
from sidecar.request.counting.exact import ExactCounter
from sidecar.routes.table import RouteTable

TABLE = RouteTable()
# Shows what reaches the template, one line a message. (A newline right after a block
# tag is trimmed, as Hugging Face's environment trims it: the newlines are expressions.)
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }}={{ m['content'] | tojson }}"
    "{% if m['tool_calls'] is defined %} calls={{ m['tool_calls'] | tojson }}{% endif %}"
    "{% if m['reasoning'] is defined %} thinks={{ m['reasoning'] }}{% endif %}{{ '\\n' }}"
    "{% endfor %}{% if tools %}tools={{ tools | tojson }}{{ '\\n' }}{% endif %}"
    "{% if add_generation_prompt %}>{% endif %}"
    "{% if persona is defined %}persona={{ persona }}{% endif %}"
)


def whitespace_tokenizer(directory, config: dict) -> ExactCounter:
    """A word-level tokenizer: one token a whitespace-separated word (or symbol run)."""
    vocab = {"[UNK]": 0}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return ExactCounter(directory / "tokenizer.json")


@pytest.fixture
def counter(tmp_path) -> ExactCounter:
    config = {"bos_token": {"content": "<s>"}, "eos_token": "</s>", "chat_template": TEMPLATE}
    return whitespace_tokenizer(tmp_path, config)


def parse(path: str, body: dict):
    return read(TABLE.resolve("POST", path), json.dumps(body).encode(), {})


def rendered(counter: ExactCounter, path: str, body: dict) -> str:
    from sidecar.request.counting.chat_form import chat_forms

    forms = chat_forms(parse(path, body))
    assert forms is not None
    return "".join(counter.render(form) for form in forms)


def test_messages_reach_the_template_as_the_engine_reads_them(counter):
    body = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "<b>"}],
            },
            {
                "role": "assistant",
                "reasoning_content": "why",
                "tool_calls": [
                    {
                        "id": "1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"x": 1}'},
                    }
                ],
            },
            {
                "role": "assistant",
                "tool_calls": [{"function": {"name": "g", "arguments": "no json"}}],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "f", "extra": "dropped"}}],
        "chat_template_kwargs": {"persona": "kind", "unread": "x"},
    }
    text = rendered(counter, "/v1/chat/completions", body)
    assert text.splitlines() == [
        '<s>user="a\\n<b>"',  # text parts joined; tojson does not escape HTML
        'assistant="" calls=[{"id": "1", "type": "function", "function": {"name": "f", '
        '"arguments": {"x": 1}}}] thinks=why',
        'assistant="" calls=[{"function": {"name": "g", "arguments": {}}}]',
        'tools=[{"type": "function", "function": {"name": "f", "description": null, '
        '"parameters": null}}]',
        ">persona=kind",
    ]
    parsed = parse("/v1/chat/completions", body)
    assert counter(parsed, frozenset()) == len(text.split())


def test_a_continued_answer_ends_where_its_text_does(counter):
    body = {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "so"}],
        "add_generation_prompt": False,
        "continue_final_message": True,
    }
    assert rendered(counter, "/v1/chat/completions", body) == '<s>user="q"\nassistant="so'


def test_messages_api_becomes_chat_as_the_engine_turns_it():
    form = from_messages(
        {
            "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "t"},
                        {"type": "tool_use", "id": "u", "name": "f", "input": {"k": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "u", "content": "r"}],
                },
            ],
            "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        }
    )
    assert [m["role"] for m in form.messages] == ["system", "user", "assistant", "tool"]
    assert form.messages[0]["content"] == "AB"
    assert form.messages[2]["reasoning"] == "t"
    assert form.messages[3] == {"role": "tool", "tool_call_id": "u", "content": "r"}
    assert form.tools == [
        {
            "type": "function",
            "function": {"name": "f", "description": None, "parameters": {"type": "object"}},
        }
    ]


def test_responses_items_join_the_assistant_turn_they_belong_to():
    form = from_responses(
        {
            "instructions": "be brief",
            "input": [
                {"role": "user", "content": "q"},
                {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "t"}]},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "r"},
            ],
        }
    )
    roles = [m["role"] for m in form.messages]
    assert roles == ["system", "user", "assistant", "tool"]
    assert form.messages[2]["reasoning"] == "t" and len(form.messages[2]["tool_calls"]) == 1


def test_a_template_that_refuses_counts_the_text(tmp_path):
    config = {"chat_template": "{{ raise_exception('roles must alternate') }}"}
    counter = whitespace_tokenizer(tmp_path, config)
    parsed = parse("/v1/chat/completions", {"messages": [{"role": "user", "content": "a b c"}]})
    assert counter(parsed, frozenset()) == 3 + parsed.prompt.template_overhead


def test_the_template_beside_the_tokenizer_is_found(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{% generation %}x y{% endgeneration %}")
    counter = whitespace_tokenizer(tmp_path, {})
    parsed = parse("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert counter(parsed, frozenset()) == 2


def test_completions_count_their_prompts_and_token_ids(counter):
    assert counter(parse("/v1/completions", {"prompt": ["a b", "c"]}), frozenset()) == 3
    assert counter(parse("/v1/completions", {"prompt": [[1, 2], [3]]}), frozenset()) == 3


def test_items_the_engine_could_not_read_are_counted_as_text(counter):
    body = {
        "input": [
            {"type": "reasoning", "content": ["not a part"]},
            {"role": "user", "content": "a"},
        ]
    }
    parsed = parse("/v1/responses", body)
    assert counter(parsed, frozenset()) == 4 + parsed.prompt.template_overhead  # 4 words


def test_a_request_chat_template_is_rendered_instead_of_the_models(counter):
    """Where the pool takes a request's own template (vLLM's --trust-request-chat-template),
    the prompt counted is what that template renders, with the tokenizer's special tokens."""
    user = [{"role": "user", "content": "one two"}]
    own = "{{ bos_token }} {% for m in messages %}{{ m.content }} {% endfor %}" + "pad " * 50
    body = {"model": "m", "messages": user, "chat_template": own}
    assert rendered(counter, "/v1/chat/completions", body) == "<s> one two " + "pad " * 50
    assert counter(parse("/v1/chat/completions", body), frozenset()) == 53
    kwargs = {"model": "m", "messages": user, "chat_template_kwargs": {"chat_template": own}}
    assert counter(parse("/v1/chat/completions", kwargs), frozenset()) == 53
    plain = parse("/v1/chat/completions", {"model": "m", "messages": user})
    assert counter(plain, frozenset()) < 10  # the model's own template
