"""Each API's body read for admission: prompt, media, requested output, stream, limits."""

from __future__ import annotations

import json

import pytest

from sidecar.config.pools import resolve as resolve_pools
from sidecar.config.schema import MediaConfig, QosConfig
from sidecar.config.template import TemplateField
from sidecar.request.bodies.limits import MAX_DEPTH, MAX_ITEMS, InvalidRequest, parse_object
from sidecar.request.bodies.parsed import Media, TextForm
from sidecar.request.bodies.read import read
from sidecar.request.bodies.tokens import estimate, estimate_text_tokens
from sidecar.request.policy.cost import price, prompt_tokens
from sidecar.request.policy.guards import apply_guards
from sidecar.routes.kinds import Api, RouteKind
from sidecar.routes.table import RouteTable
from sidecar.tooling.benchmarks.prompt_estimate import estimate_prompt_tokens

TABLE = RouteTable()
MEDIA = MediaConfig()
P0 = QosConfig().tiers.p0


def parse(path: str, body: dict, headers: dict | None = None):
    return read(TABLE.resolve("POST", path), json.dumps(body).encode(), headers or {})


def tokens(parsed) -> int:
    return prompt_tokens(parsed.prompt, estimate(parsed), MEDIA)


def test_chat_costs_what_it_always_did():
    body = {
        "messages": [{"role": "user", "content": "where is my order " * 20}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "max_completion_tokens": 70,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    parsed = parse("/v1/chat/completions", body)
    assert tokens(parsed) == estimate_prompt_tokens(body)
    assert parsed.output.requested == 70 and parsed.shape.text is TextForm.CHAT
    assert parsed.stream and parsed.usage_in_stream


TEXT = "the parcel left the depot at nine and reaches the customer by noon " * 60


@pytest.mark.parametrize(
    "where",
    [
        {"messages": [{"role": "user", "content": TEXT}]},
        {
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"type": "function", "function": {"name": "track", "arguments": TEXT}}
                    ],
                }
            ]
        },
        {"messages": [{"role": "assistant", "content": "", "reasoning_content": TEXT}]},
        {"messages": [{"role": "assistant", "content": "", "reasoning": TEXT}]},
        {"messages": [{"role": "user", "content": "", "name": TEXT}]},
        {"messages": [{"role": "user", "content": "hi"}], "documents": [{"text": TEXT}]},
        {
            "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"enable_thinking": False, "context": TEXT},
        },
        {"messages": [{"role": "assistant", "function_call": {"name": "f", "arguments": TEXT}}]},
    ],
    ids=["content", "tool_calls", "reasoning_content", "reasoning", "name", "documents",
         "chat_template_kwargs", "function_call"],
)  # fmt: skip
def test_text_costs_about_the_same_in_every_field_a_template_renders(where):
    in_content = tokens(
        parse("/v1/chat/completions", {"messages": [{"role": "user", "content": TEXT}]})
    )
    here = tokens(parse("/v1/chat/completions", where))
    assert 0.97 * in_content <= here <= 1.05 * in_content, (here, in_content)


def test_a_pools_template_may_leave_fields_out_of_the_count():
    body = {"messages": [{"role": "user", "content": "hi", "name": TEXT}], "documents": [TEXT]}
    parsed = parse("/v1/chat/completions", body)
    everything = tokens(parsed)
    config = QosConfig.model_validate(
        {
            "template": {"unrendered": ["documents"]},
            "pools": {
                "plain": {"models": ["m"], "template_unrendered": ["name", "documents"]},
                "rag": {"models": ["r"]},
            },
        }
    )
    pools = {pool.name: pool for pool in resolve_pools(config)}
    assert pools["rag"].template.unrendered == {TemplateField.DOCUMENTS}  # the top level's

    def counted(pool: str) -> int:
        unrendered = pools[pool].template.unrendered
        return prompt_tokens(parsed.prompt, estimate(parsed, unrendered), MEDIA)

    assert counted("plain") == tokens(
        parse("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    )
    assert counted("plain") < counted("rag") < everything


def test_tool_call_arguments_given_as_an_object_count_as_json():
    call = {"function": {"name": "track", "arguments": {"note": TEXT}}}
    body = {"messages": [{"role": "assistant", "tool_calls": [call]}]}
    assert (
        json.dumps({"note": TEXT}, separators=(",", ":"))
        in parse("/v1/chat/completions", body).prompt.texts
    )
    with pytest.raises(InvalidRequest, match="tool_calls"):
        parse("/v1/chat/completions", {"messages": [{"role": "assistant", "tool_calls": 7}]})


def test_images_are_not_free():
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 9000}}
    low = {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}}
    text = {"type": "text", "text": "what is this?"}
    parsed = parse(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": [text, part, low]}]}
    )
    assert parsed.prompt.media == (Media.IMAGE, Media.IMAGE_LOW_DETAIL)
    assert parsed.prompt.estimated_from_outside
    expected = 4 + estimate_text_tokens("what is this?") + MEDIA.image_tokens + 85
    assert tokens(parsed) == expected  # the image's base64 is not counted as text


def test_responses_api_fields():
    body = {
        "model": "m",
        "instructions": "be brief",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hello there"}]},
            {"type": "function_call_output", "call_id": "c", "output": "42 degrees"},
            {"role": "user", "content": [{"type": "input_image", "image_url": "https://x"}]},
        ],
        "max_output_tokens": 300,
        "previous_response_id": "resp_1",
        "stream": True,
    }
    parsed = parse("/v1/responses", body)
    assert parsed.kind is RouteKind.RESPONSES and parsed.shape.text is TextForm.RESPONSE
    assert {"be brief", "hello there", "42 degrees"} <= set(parsed.prompt.texts)
    assert parsed.prompt.media == (Media.IMAGE,) and parsed.prompt.stored_context
    assert parsed.output.requested == 300 and parsed.output.param == "max_output_tokens"
    assert parsed.usage_in_stream  # a Responses stream always ends with its usage
    assert parse("/v1/responses", {"input": "hi"}).prompt.texts == ("hi",)
    with pytest.raises(InvalidRequest, match="'input' is required"):
        parse("/v1/responses", {"model": "m"})


def test_anthropic_messages_fields():
    body = {
        "model": "claude",
        "system": [{"type": "text", "text": "you are a shop"}],
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "input": {"q": "shoes"}}]},
            {"role": "user", "content": [{"type": "tool_result", "content": "in stock"}]},
        ],
        "max_tokens": 1000,
    }
    parsed = parse("/v1/messages", body)
    assert parsed.shape.api is Api.ANTHROPIC and parsed.shape.text is TextForm.MESSAGE
    assert {"you are a shop", '{"q":"shoes"}', "in stock"} <= set(parsed.prompt.texts)
    assert parsed.prompt.media == (Media.IMAGE,) and parsed.output.requested == 1000
    with pytest.raises(InvalidRequest, match="max_tokens"):
        parse("/v1/messages", {**body, "max_tokens": None})


def test_a_batch_counts_every_conversation_and_its_output():
    one = [{"role": "user", "content": "a question of some length"}]
    parsed = parse("/v1/chat/completions/batch", {"messages": [one, one, one], "max_tokens": 50})
    assert parsed.prompt.texts == ("a question of some length",) * 3
    assert price(QosConfig().tiers.p1, 10, parsed.output).expected_output == 150
    assert parsed.shape.choices == 3


@pytest.mark.parametrize(
    "path,body,field",
    [
        ("/inference/v1/generate", {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 9}},
         ("sampling_params", "max_tokens")),
        ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 9}},
         ("sampling_params", "max_new_tokens")),
        ("/generate", {"inputs": "hi", "parameters": {"max_new_tokens": 9}},
         ("parameters", "max_new_tokens")),
    ],
)  # fmt: skip
def test_each_servers_generate_body(path, body, field):
    parsed = parse(path, body)
    assert parsed.shape.api is Api.TGI and parsed.output.requested == 9
    assert parsed.output.default_field == field
    capped = apply_guards(parse(path, {**body, field[0]: {field[1]: 5000}}), P0, "p0", 3)
    assert capped[field[0]][field[1]] == P0.max_tokens_cap
    assert parse("/generate_stream", {"inputs": "hi"}).stream


def test_input_only_routes_count_their_texts_and_token_ids():
    assert tokens(parse("/v1/embeddings", {"model": "e", "input": ["abcd" * 10, "ab"]})) == 11
    assert tokens(parse("/v1/embeddings", {"input": [[1, 2, 3], [4, 5]]})) == 5
    rerank = parse("/rerank", {"query": "shoes", "documents": ["red shoes", {"text": "hats"}]})
    assert set(rerank.prompt.texts) == {"shoes", "red shoes", "hats"}
    assert rerank.output is None and rerank.shape.text is None
    with pytest.raises(InvalidRequest, match="no input"):
        parse("/v1/embeddings", {"model": "e"})


def test_invocations_read_as_the_body_says():
    assert parse("/invocations", {"messages": [{"role": "user"}]}).kind is RouteKind.CHAT
    assert parse("/invocations", {"prompt": "x"}).kind is RouteKind.COMPLETIONS
    assert parse("/invocations", {"input": "x"}).kind is RouteKind.INPUT_ONLY


def test_audio_uploads_cost_their_size():
    boundary = "b0undary"
    raw = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        f"Content-Type: audio/wav\r\n\r\n{'x' * 32000}\r\n--{boundary}--\r\n"
    ).encode()
    headers = {"content-type": f"multipart/form-data; boundary={boundary}"}
    parsed = read(TABLE.resolve("POST", "/v1/audio/transcriptions"), raw, headers)
    assert parsed.model == "whisper" and not parsed.json_body
    assert tokens(parsed) == -(-len(raw) // 320)
    with pytest.raises(InvalidRequest, match="multipart"):
        read(TABLE.resolve("POST", "/v1/audio/transcriptions"), raw, {})


def test_bodies_beyond_the_limits_are_refused_not_walked():
    deep = b'{"messages":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(InvalidRequest, match=f"{MAX_DEPTH} levels"):
        read(TABLE.resolve("POST", "/v1/chat/completions"), deep, {})
    many = {"messages": [{"role": "user", "content": "x"}] * (MAX_ITEMS + 1)}
    with pytest.raises(InvalidRequest, match="more than"):
        parse("/v1/messages", {**many, "max_tokens": 5})
    # Brackets inside strings are text, not depth.
    text = {"messages": [{"role": "user", "content": "[" * 1000}], "max_tokens": 5}
    assert parse("/v1/messages", text).prompt.texts == ("[" * 1000,)


@pytest.mark.parametrize("levels", [MAX_DEPTH, MAX_DEPTH + 1, 900])
def test_the_depth_limit_counts_every_container_the_body_included(levels):
    # The body's own object is level 1; the rest nests in one of its fields, alternating
    # objects and arrays, beside a shallow sibling that must not hide it.
    nested: object = 1
    for level in range(levels - 1):
        nested = [nested] if level % 2 else {"k": nested}
    raw = json.dumps({"model": "m", "shallow": [], "deep": nested}).encode()
    if levels <= MAX_DEPTH:
        assert parse_object(raw)["model"] == "m"
    else:
        with pytest.raises(InvalidRequest, match=f"{MAX_DEPTH} levels"):
            parse_object(raw)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b'{"a": "\xff"}', "not valid UTF-8"),
        (b"\xff\xfe\x00garbage", "not valid UTF-8"),
        (b"", "not valid JSON"),
        (b'{"a": 1} trailing', "trailing"),
        (b'{"a": NaN}', "invalid character"),
        (b"\xef\xbb\xbf{}", "invalid character"),
        (b"[1, 2]", "must be a JSON object"),
    ],
)
def test_what_is_not_a_json_object_is_refused_with_its_reason(raw, why):
    with pytest.raises(InvalidRequest, match=why):
        parse_object(raw)


def test_numbers_are_read_as_written():
    # Integers past 64 bits stay integers (a seed), so a rewritten body keeps them exact.
    body = parse_object(b'{"seed": 123456789012345678901234567890, "temperature": 0.1}')
    assert body == {"seed": 123456789012345678901234567890, "temperature": 0.1}


ASKED = "Where is the parcel I ordered on Monday, and when will it arrive? " * 40


@pytest.mark.parametrize(
    ("path", "carried"),
    [
        # Fill-in-the-middle: the text after the gap.
        ("/v1/completions", {"prompt": "x", "suffix": ASKED}),
        # vLLM's Responses field: a conversation carried in the request (harmony messages).
        (
            "/v1/responses",
            {
                "input": "x",
                "previous_input_messages": [
                    {"author": {"role": "user"}, "content": [{"type": "text", "text": ASKED}]}
                ],
            },
        ),
    ],
    ids=["suffix", "previous_input_messages"],
)
def test_prompt_text_in_other_fields_costs_what_the_same_text_costs_as_the_prompt(path, carried):
    """The engine renders these into the prompt: the same text costs within 30 % of what
    it costs as the prompt itself."""
    plain = tokens(parse(path, {"model": "m", "prompt" if "prompt" in carried else "input": ASKED}))
    elsewhere = tokens(parse(path, {"model": "m", **carried}))
    assert abs(elsewhere - plain) <= 0.3 * plain, (elsewhere, plain)


def test_template_arguments_cost_in_every_api_vllm_renders_through_its_template():
    kwargs = {"chat_template_kwargs": {"persona": ASKED}}
    said = [{"role": "user", "content": "x"}]
    for path, body in (
        ("/v1/responses", {"model": "m", "input": "x"}),
        ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": said}),
    ):
        added = tokens(parse(path, {**body, **kwargs})) - tokens(parse(path, body))
        assert added == estimate_text_tokens(ASKED), path


def test_media_beside_token_ids_costs_as_media():
    body = {"token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 4}}
    parts = [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
    plain = parse("/inference/v1/generate", body)
    with_media = parse("/inference/v1/generate", {**body, "content_parts": parts})
    assert plain.prompt.media == () and with_media.prompt.media == (Media.IMAGE,)
    assert tokens(with_media) == tokens(plain) + MEDIA.image_tokens
