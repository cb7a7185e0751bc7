"""A stream ended early by the gateway, in each API's shape: what passed is whole events
only, however the chunks fell, and the official clients read the closed stream to its
end."""

from __future__ import annotations

import json

import anthropic
import httpx2 as httpx
import openai
import pytest

from sidecar.request.answers.sse import event
from sidecar.request.answers.stream_end import EVICTED, MESSAGE_STOP_REASON, StreamTail
from sidecar.request.bodies.parsed import TextForm


def chat_stream(tokens: int) -> bytes:
    """A vLLM chat stream cut short: role chunk, then a token a chunk with its running
    usage (continuous usage stats)."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = event({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    for n in range(1, tokens + 1):
        usage = {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}
        choice = {"index": 0, "delta": {"content": f"w{n} "}, "finish_reason": None}
        out += event({**base, "choices": [choice], "usage": usage})
    return out


def message_stream(tokens: int) -> bytes:
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 7, "output_tokens": 0},
    }
    out = event({"type": "message_start", "message": start}, "message_start")
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    out += event(block, "content_block_start")
    for n in range(tokens):
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": f"w{n} "},
        }
        out += event(delta, "content_block_delta")
    return out


def passed_in_chunks(tail: StreamTail, stream: bytes, size: int) -> bytes:
    passed = b""
    for at in range(0, len(stream), size):
        passed += tail.feed(stream[at : at + size])
    assert passed.endswith(b"\n\n") or not passed  # whole events only
    return passed


def transport(body: bytes) -> httpx.Client:
    def answer(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return httpx.Client(transport=httpx.MockTransport(answer))


@pytest.mark.parametrize("size", [1, 17, 4096])
def test_a_chat_stream_ends_with_its_reason_and_usage_so_far(size):
    tail = StreamTail(TextForm.CHAT)
    passed = passed_in_chunks(tail, chat_stream(5), size)
    closed = passed + tail.end()
    client = openai.OpenAI(api_key="k", base_url="http://gateway/v1", http_client=transport(closed))
    chunks = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    *_, finishing, closing = chunks
    assert finishing.choices[0].finish_reason == EVICTED
    assert finishing.id == "chatcmpl-1" and finishing.model == "m"
    # What passed before the cut, and the engine's running count of it, in the closing
    # usage chunk (no choices), as the engine ends a stream whose client asked for usage.
    words = text.split()
    assert words == [f"w{n}" for n in range(1, len(words) + 1)]
    assert closing.choices == [] and closing.usage.completion_tokens == len(words)


def test_a_messages_stream_ends_its_open_block_and_its_turn():
    tail = StreamTail(TextForm.MESSAGE)
    closed = passed_in_chunks(tail, message_stream(4), 23) + tail.end()
    client = anthropic.Anthropic(
        api_key="k", base_url="http://gateway", http_client=transport(closed)
    )
    with client.messages.stream(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == MESSAGE_STOP_REASON
    assert final.usage.output_tokens == len(final.content[0].text.split())


def test_a_completions_stream_ends_every_choice():
    base = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
    stream = b"".join(
        event({**base, "choices": [{"index": i, "text": "a", "finish_reason": None}]})
        for i in (0, 1, 0, 1)
    )
    tail = StreamTail(TextForm.COMPLETION)
    closed = tail.feed(stream) + tail.end()
    last = json.loads(closed.split(b"\n\n")[-3][6:])
    assert [c["finish_reason"] for c in last["choices"]] == [EVICTED, EVICTED]
    assert closed.endswith(b"data: [DONE]\n\n")


def responses_stream(tokens: int) -> bytes:
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": "in_progress",
        "model": "m",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
    }
    item = {
        "type": "message",
        "id": "msg_1",
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": "", "annotations": []}
    events = [
        ("response.created", {"response": response}),
        ("response.output_item.added", {"output_index": 0, "item": item}),
        ("response.content_part.added", {**at, "part": part}),
    ]
    events += [
        ("response.output_text.delta", {**at, "delta": f"w{n} ", "logprobs": []})
        for n in range(tokens)
    ]
    return b"".join(
        event({"type": name, "sequence_number": number, **fields}, name)
        for number, (name, fields) in enumerate(events)
    )


def test_a_responses_stream_ends_incomplete_with_the_output_so_far():
    tail = StreamTail(TextForm.RESPONSE)
    closed = passed_in_chunks(tail, responses_stream(6), 31) + tail.end()
    client = openai.OpenAI(api_key="k", base_url="http://gateway/v1", http_client=transport(closed))
    events = list(client.responses.create(model="m", input="x", stream=True))
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == EVICTED
    assert last.response.usage.output_tokens == 6
    assert [e.sequence_number for e in events] == list(range(len(events)))
