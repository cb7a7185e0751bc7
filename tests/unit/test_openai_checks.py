from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.request.bodies.limits import InvalidRequest, parse_object
from sidecar.request.bodies.openai import read_chat, read_completions
from sidecar.routes.kinds import RouteKind

USER = [{"role": "user", "content": "hi"}]
READERS = {RouteKind.CHAT: read_chat, RouteKind.COMPLETIONS: read_completions}


def check(kind: RouteKind, body: dict) -> None:
    READERS[kind](parse_object(json.dumps(body).encode()))


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "messages"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": ["hi"]}, "messages[0]"),
        ({"messages": [{"content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "messages[0].content[0]"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER, "max_tokens": "10"}, "max_tokens"),
        ({"messages": USER, "max_completion_tokens": 1.5}, "max_completion_tokens"),
        ({"messages": USER, "stream": "yes"}, "stream"),
        ({"messages": USER, "model": 3}, "model"),
        ({"messages": USER, "tools": {}}, "tools"),
    ],
)
def test_bad_chat_bodies_name_the_param(body, param):
    with pytest.raises(InvalidRequest) as error:
        check(RouteKind.CHAT, body)
    assert error.value.param == param


@pytest.mark.parametrize("prompt", [None, "", [], [1, "a"], [[1], []], {"a": 1}, 5])
def test_bad_prompts(prompt):
    body = {} if prompt is None else {"prompt": prompt}
    if prompt == "":
        check(RouteKind.COMPLETIONS, body)  # an empty string is a valid (if odd) prompt
        return
    with pytest.raises(InvalidRequest):
        check(RouteKind.COMPLETIONS, body)


@pytest.mark.parametrize(
    "body",
    [
        {"messages": USER, "max_tokens": None, "stream": True, "tools": []},
        {"messages": [{"role": "assistant", "content": None, "tool_calls": []}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
    ],
)
def test_good_chat_bodies_pass(body):
    check(RouteKind.CHAT, body)


@pytest.mark.parametrize("prompt", ["x", ["a", "b"], [1, 2], [[1, 2], [3]]])
def test_good_prompts_pass(prompt):
    check(RouteKind.COMPLETIONS, {"prompt": prompt})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
keys = st.sampled_from(
    [
        "messages",
        "prompt",
        "model",
        "stream",
        "max_tokens",
        "tools",
        "stream_options",
        "max_completion_tokens",
        "role",
        "content",
    ]
)


@settings(max_examples=300, deadline=None)
@given(body=st.dictionaries(keys, json_values, max_size=6), raw=st.binary(max_size=64))
def test_any_input_is_either_valid_or_an_invalid_request(body, raw):
    for reader in READERS.values():
        for data in (json.dumps(body).encode(), raw):
            try:
                reader(parse_object(data))
            except InvalidRequest as error:
                assert error.message
