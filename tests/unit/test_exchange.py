"""The ext_proc state machine, driven with Envoy's messages, no servers."""

from __future__ import annotations

import dataclasses

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from sidecar.extproc.exchange import Exchange, Phase, ProtocolError
from sidecar.policy.decision import Admit, Decision, RequestView, Respond


def headers(pairs: dict[str, str], end_of_stream: bool = False, raw: bool = True):
    values = [
        base_pb2.HeaderValue(key=k, raw_value=v.encode())
        if raw
        else base_pb2.HeaderValue(key=k, value=v)
        for k, v in pairs.items()
    ]
    return ext_proc.HttpHeaders(
        headers=base_pb2.HeaderMap(headers=values), end_of_stream=end_of_stream
    )


def request_headers(end_of_stream: bool = False, **extra: str) -> ext_proc.ProcessingRequest:
    pairs = {
        ":method": "POST",
        ":path": "/v1/chat/completions",
        "content-type": "application/json",
        **extra,
    }
    return ext_proc.ProcessingRequest(request_headers=headers(pairs, end_of_stream))


def request_body(data: bytes, end_of_stream: bool = True) -> ext_proc.ProcessingRequest:
    return ext_proc.ProcessingRequest(
        request_body=ext_proc.HttpBody(body=data, end_of_stream=end_of_stream)
    )


def response_headers(status: str = "200", end_of_stream: bool = False):
    return ext_proc.ProcessingRequest(response_headers=headers({":status": status}, end_of_stream))


class Recording:
    """A decider that remembers what it saw and answers what it was told."""

    def __init__(
        self, decision: Decision | Exception, watch: bool = True, first_token: bool = True
    ) -> None:
        self.decision = decision
        self.watch = watch
        self.first_token = first_token
        self.first_token_asked = 0
        self.seen: list[RequestView] = []

    def watch_response(self) -> bool:
        return self.watch

    def watch_first_token(self) -> bool:
        self.first_token_asked += 1
        return self.first_token

    async def decide(self, request: RequestView) -> Decision:
        self.seen.append(request)
        if isinstance(self.decision, Exception):
            raise self.decision
        return self.decision


BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


@pytest.mark.asyncio
async def test_body_request_is_decided_once_at_the_end_of_the_body():
    decider = Recording(Admit())
    exchange = Exchange(decider)
    first = await exchange.handle(request_headers())
    assert first.WhichOneof("response") == "request_headers"
    assert decider.seen == []
    assert exchange.phase is Phase.REQUEST_BODY
    second = await exchange.handle(request_body(BODY))
    assert second.WhichOneof("response") == "request_body"
    assert [v.body for v in decider.seen] == [BODY]
    assert decider.seen[0].path == "/v1/chat/completions"
    assert exchange.phase is Phase.RESPONSE_HEADERS


@pytest.mark.asyncio
async def test_streamed_body_chunks_are_joined_before_deciding():
    decider = Recording(Admit())
    exchange = Exchange(decider)
    await exchange.handle(request_headers())
    await exchange.handle(request_body(BODY[:10], end_of_stream=False))
    assert decider.seen == []
    await exchange.handle(request_body(BODY[10:]))
    assert decider.seen[0].body == BODY


@pytest.mark.asyncio
async def test_request_without_body_is_decided_at_its_headers():
    decider = Recording(Admit())
    exchange = Exchange(decider)
    await exchange.handle(
        ext_proc.ProcessingRequest(
            request_headers=headers({":method": "GET", ":path": "/v1/models"}, True)
        )
    )
    assert decider.seen[0].body is None
    assert decider.seen[0].method == "GET"
    assert exchange.phase is Phase.RESPONSE_HEADERS


@pytest.mark.asyncio
async def test_respond_becomes_an_immediate_response_and_ends_the_exchange():
    refusal = Respond(429, b'{"error":{}}', "shed_test", {"retry-after": "15"})
    exchange = Exchange(Recording(refusal))
    await exchange.handle(request_headers())
    answer = await exchange.handle(request_body(BODY))
    immediate = answer.immediate_response
    assert answer.WhichOneof("response") == "immediate_response"
    assert immediate.status.code == 429
    assert immediate.body == b'{"error":{}}'
    assert {h.header.key: h.header.raw_value for h in immediate.headers.set_headers} == {
        "retry-after": b"15"
    }
    assert exchange.phase is Phase.DONE


@pytest.mark.asyncio
async def test_admit_applies_headers_and_a_replaced_body_with_its_length():
    admit = Admit(
        set_headers={"x-qos-tier": "p1"},
        remove_headers=("x-qos-spoof",),
        replace_body=b'{"short":1}',
    )
    exchange = Exchange(Recording(admit))
    await exchange.handle(request_headers())
    answer = await exchange.handle(request_body(BODY))
    common = answer.request_body.response
    assert common.body_mutation.body == b'{"short":1}'
    set_headers = {h.header.key: h.header.raw_value for h in common.header_mutation.set_headers}
    assert set_headers == {"x-qos-tier": b"p1", "content-length": b"11"}
    assert list(common.header_mutation.remove_headers) == ["x-qos-spoof"]


@pytest.mark.asyncio
async def test_response_phases_run_to_done():
    exchange = Exchange(Recording(Admit()))
    await exchange.handle(request_headers())
    await exchange.handle(request_body(BODY))
    answer = await exchange.handle(response_headers("503"))
    assert answer.WhichOneof("response") == "response_headers"
    assert exchange.response_status == 503
    assert exchange.phase is Phase.RESPONSE_BODY
    body = ext_proc.ProcessingRequest(
        response_body=ext_proc.HttpBody(body=b"data: x\n\n", end_of_stream=True)
    )
    assert (await exchange.handle(body)).WhichOneof("response") == "response_body"
    assert exchange.phase is Phase.DONE


@pytest.mark.asyncio
async def test_message_out_of_phase_is_a_protocol_error():
    exchange = Exchange(Recording(Admit()))
    with pytest.raises(ProtocolError, match="response_headers is not expected"):
        await exchange.handle(response_headers())
    await exchange.handle(request_headers())
    with pytest.raises(ProtocolError, match="response_headers is not expected"):
        await exchange.handle(response_headers())


@pytest.mark.asyncio
async def test_a_failing_decider_admits_instead_of_failing_the_request():
    seen = []
    exchange = Exchange(Recording(RuntimeError("bug")), on_decision=lambda d, s: seen.append(d))
    await exchange.handle(request_headers())
    answer = await exchange.handle(request_body(BODY))
    assert answer.WhichOneof("response") == "request_body"
    assert [d.reason for d in seen] == ["decider_error"]


@pytest.mark.asyncio
async def test_headers_are_read_from_value_and_raw_value_and_lower_cased():
    decider = Recording(Admit())
    exchange = Exchange(decider)
    message = ext_proc.ProcessingRequest(
        request_headers=headers(
            {":method": "GET", ":path": "/v1/models", "X-Tenant": "a"},
            end_of_stream=True,
            raw=False,
        )
    )
    await exchange.handle(message)
    assert decider.seen[0].headers["x-tenant"] == "a"
    assert decider.seen[0].path == "/v1/models"


@pytest.mark.asyncio
async def test_a_held_request_is_answered_twice_wait_then_decision():
    from sidecar.policy.decision import Hold

    async def resume():
        return Admit(reason="admitted", slot="s-1")

    seen = []
    exchange = Exchange(
        Recording(Hold(resume, max_wait=4.0)), on_decision=lambda d, s: seen.append(d)
    )
    await exchange.handle(request_headers())
    answers = [a async for a in exchange.answers(request_body(BODY))]
    assert [a.WhichOneof("response") for a in answers] == [None, "request_body"]
    assert answers[0].override_message_timeout.ToTimedelta().total_seconds() == 5.0
    assert [d.slot for d in seen] == ["s-1"]
    assert exchange.admitted.slot == "s-1"
    assert exchange.phase is Phase.RESPONSE_HEADERS


@pytest.mark.asyncio
async def test_a_sampled_stream_has_its_body_watched_and_its_first_byte_timed():
    firsts = []
    exchange = Exchange(
        Recording(Admit(slot="s", tier="p0", time_first_byte=True)),
        on_first_byte=lambda admit, seconds: firsts.append((admit.slot, seconds)),
    )
    await exchange.handle(request_headers())
    await exchange.handle(request_body(BODY))
    answer = await exchange.handle(response_headers())
    assert answer.mode_override.response_body_mode == ProcessingMode.STREAMED
    for chunk, last in ((b"data: 1\n\n", False), (b"data: 2\n\n", False), (b"", True)):
        await exchange.handle(
            ext_proc.ProcessingRequest(
                response_body=ext_proc.HttpBody(body=chunk, end_of_stream=last)
            )
        )
    assert [slot for slot, _ in firsts] == ["s"]  # once, at the first chunk
    assert firsts[0][1] >= 0 and exchange.phase is Phase.DONE


@pytest.mark.asyncio
async def test_unsampled_streams_are_not_watched():
    exchange = Exchange(Recording(Admit(slot="s", tier="p0")))
    await exchange.handle(request_headers())
    await exchange.handle(request_body(BODY))
    answer = await exchange.handle(response_headers())
    assert not answer.HasField("mode_override")


@pytest.mark.asyncio
async def test_envoy_is_asked_for_the_response_only_when_the_decider_watches_it():
    watched = Recording(Admit(slot="s"), watch=True)
    exchange = Exchange(watched)
    answer = await exchange.handle(request_headers())
    assert answer.WhichOneof("response") == "request_headers"
    mode = answer.mode_override
    assert (mode.request_body_mode, mode.response_header_mode, mode.response_body_mode) == (
        ProcessingMode.BUFFERED,
        ProcessingMode.SEND,
        ProcessingMode.NONE,
    )
    await exchange.handle(request_body(BODY))
    assert exchange.response_watched

    unwatched = Recording(Admit(slot="s"), watch=False)
    exchange = Exchange(unwatched)
    answer = await exchange.handle(request_headers())
    assert not answer.HasField("mode_override")
    await exchange.handle(request_body(BODY))
    assert not exchange.response_watched


def body_with_attributes(data: bytes, **headers: str) -> ext_proc.ProcessingRequest:
    """The one message Envoy sends with request_header_mode SKIP: the body, and the
    request_attributes (a header absent from the request is absent here too)."""
    message = request_body(data)
    attributes = message.attributes["envoy.filters.http.ext_proc"]
    attributes.update({"request.method": "POST", "request.path": "/v1/chat/completions"})
    for name, value in headers.items():
        attributes.update({f"request.headers['{name.replace('_', '-')}']": value})
    attributes.update({"xds.route_name": "body", "request.size": 3.0})  # not headers
    return message


TAGGED = Admit(
    set_headers={"x-qos-tier": "p1", "x-qos-slot": "s-9", "x-qos-queue-wait-ms": "12"},
    remove_headers=("x-qos-tenant",),
    slot="s-9",
    tier="p1",
)


@pytest.mark.asyncio
async def test_a_body_sent_alone_is_decided_with_the_headers_from_its_attributes():
    decider = Recording(TAGGED)
    exchange = Exchange(decider)
    answer = await exchange.handle(body_with_attributes(BODY, authorization="Bearer k1"))
    (view,) = decider.seen
    assert (view.method, view.path, view.body) == ("POST", "/v1/chat/completions", BODY)
    assert dict(view.headers) == {
        ":method": "POST",
        ":path": "/v1/chat/completions",
        "authorization": "Bearer k1",
    }
    assert answer.WhichOneof("response") == "request_body"
    # Envoy no longer holds the headers: the tags go as metadata, for its filters to apply.
    assert not answer.request_body.response.HasField("header_mutation")
    tags = answer.dynamic_metadata.fields["qos"].struct_value
    assert dict(tags) == {"tier": "p1", "slot": "s-9", "queue_wait_ms": "12"}
    assert exchange.phase is Phase.RESPONSE_HEADERS


@pytest.mark.asyncio
async def test_a_changed_body_sent_alone_leaves_its_length_to_envoy():
    exchange = Exchange(Recording(Admit(replace_body=b'{"priority":2}')))
    answer = await exchange.handle(body_with_attributes(BODY))
    common = answer.request_body.response
    assert common.body_mutation.body == b'{"priority":2}'
    assert not common.HasField("header_mutation")  # no content-length: Envoy recounts it
    assert not answer.HasField("dynamic_metadata")  # nothing to tag


@pytest.mark.asyncio
async def test_headers_seen_first_get_the_tags_as_header_changes_and_metadata():
    exchange = Exchange(Recording(dataclasses.replace(TAGGED, replace_body=b"{}")))
    await exchange.handle(request_headers())
    answer = await exchange.handle(request_body(BODY))
    mutation = answer.request_body.response.header_mutation
    assert {h.header.key: h.header.raw_value for h in mutation.set_headers} == {
        "x-qos-tier": b"p1",
        "x-qos-slot": b"s-9",
        "x-qos-queue-wait-ms": b"12",
        "content-length": b"2",
    }
    assert list(mutation.remove_headers) == ["x-qos-tenant"]
    assert answer.dynamic_metadata.fields["qos"].struct_value["slot"] == "s-9"


@pytest.mark.asyncio
async def test_a_stream_whose_response_envoy_sends_unasked_is_timed_within_the_cap():
    stream = dataclasses.replace(TAGGED, time_first_byte=True)
    for allowed in (True, False):
        decider = Recording(stream, watch=False, first_token=allowed)
        exchange = Exchange(decider)
        await exchange.handle(body_with_attributes(BODY))
        answer = await exchange.handle(response_headers())
        assert answer.HasField("mode_override") is allowed
        assert decider.first_token_asked == 1
    # Asked for at the request headers: already counted then, not asked again.
    decider = Recording(stream, watch=True, first_token=False)
    exchange = Exchange(decider)
    await exchange.handle(request_headers())
    await exchange.handle(request_body(BODY))
    answer = await exchange.handle(response_headers())
    assert answer.mode_override.response_body_mode == ProcessingMode.STREAMED
    assert decider.first_token_asked == 0
