from __future__ import annotations

import pytest

from sidecar.request.openai_api.prompt import (
    TokenizerCounter,
    estimate_prompt_tokens,
    estimate_text_tokens,
)
from sidecar.request.openai_api.request import Endpoint, InvalidRequest, parse_completion_request


@pytest.mark.parametrize(
    ("path", "endpoint"),
    [
        ("/v1/chat/completions", Endpoint.CHAT),
        ("/v1/chat/completions?x=1", Endpoint.CHAT),
        ("/v1/completions/", Endpoint.COMPLETIONS),
        ("/v1/models", Endpoint.OTHER),
        ("/v1/chat/completionsX", Endpoint.OTHER),
    ],
)
def test_endpoint_for_path(path, endpoint):
    assert Endpoint.for_path(path) is endpoint


def test_fields_admission_reads():
    parsed = parse_completion_request(
        Endpoint.CHAT,
        b'{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":7}',
    )
    assert (parsed.model, parsed.stream, parsed.include_usage, parsed.max_tokens) == (
        "m",
        True,
        True,
        7,
    )


def test_max_completion_tokens_wins_and_bools_are_not_counts():
    parsed = parse_completion_request(
        Endpoint.CHAT, b'{"max_completion_tokens":9,"max_tokens":7,"stream":"yes"}'
    )
    assert parsed.max_tokens == 9
    assert parsed.stream is False
    assert parse_completion_request(Endpoint.CHAT, b'{"max_tokens":true}').max_tokens is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not valid UTF-8"),
        (b"[1,2]", "must be a JSON object"),
    ],
)
def test_bad_bodies_raise_invalid_request(raw, message):
    with pytest.raises(InvalidRequest, match=message):
        parse_completion_request(Endpoint.CHAT, raw)


def test_estimate_counts_text_parts_messages_and_token_ids():
    chat = {
        "messages": [
            {"role": "system", "content": "x" * 40},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "y" * 8},
                    {"type": "image_url", "image_url": {"url": "u"}},
                ],
            },
        ]
    }
    assert estimate_prompt_tokens(chat) == 10 + 2 + 2 * 4
    assert estimate_prompt_tokens({"prompt": ["abcd", "abcdefgh"]}) == 3
    assert estimate_prompt_tokens({"prompt": [1, 2, 3]}) == 3
    assert estimate_prompt_tokens({"prompt": [[1, 2], [3]]}) == 3
    assert estimate_prompt_tokens({}) == 1


def test_cjk_text_is_counted_near_a_token_a_character():
    chinese = "请帮我退回重复扣的那一笔款项谢谢"  # 16 characters
    assert estimate_text_tokens(chinese) == 13  # 16 characters at 0.8, rounded up
    assert estimate_text_tokens("abcd" * 10 + chinese) == 10 + 13


def test_tool_schemas_count_towards_the_prompt():
    tools = [{"type": "function", "function": {"name": "lookup_order", "parameters": {}}}]
    without = estimate_prompt_tokens({"messages": [{"role": "user", "content": "hi"}]})
    with_tools = estimate_prompt_tokens(
        {"messages": [{"role": "user", "content": "hi"}], "tools": tools}
    )
    assert with_tools - without >= 15


def test_tokenizer_counter_counts_with_the_models_own_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = ["where is my order", "my payment failed", "order shipped today"] * 50
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))

    count = TokenizerCounter(path)
    body = {
        "messages": [
            {"role": "user", "content": "where is my order"},
            {"role": "user", "content": [{"type": "text", "text": "payment"}]},
        ]
    }
    words = len(tokenizer.encode("where is my order").ids) + len(tokenizer.encode("payment").ids)
    assert count(body) == words + 2 * 4
    assert count({"prompt": "order shipped"}) == len(tokenizer.encode("order shipped").ids)
