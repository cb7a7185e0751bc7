"""The ext_proc state machine, driven with Envoy's messages, no servers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from sidecar.config.base import Tier
from sidecar.request.eviction.streams import RunningStream
from sidecar.request.extproc.exchange import Exchange, Phase, ProtocolError
from sidecar.request.policy.decision import (
    Admission,
    Admit,
    Decision,
    RequestView,
    Respond,
    ResponseWatch,
    Upstream,
)


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
    """A decider that remembers what it saw and answers what it was told, having held
    the exchange `holds` seconds first when told to (and waited `waits` seconds)."""

    def __init__(
        self,
        decision: Decision | Exception,
        watch: bool = False,
        holds: float | None = None,
        waits: float = 0.0,
        evictable: bool = False,
    ) -> None:
        self.decision = decision
        self.watch = watch
        self.evictable = evictable
        self.holds = holds
        self.waits = waits
        self.seen: list[RequestView] = []

    def watch_response(self, headers) -> ResponseWatch:
        return ResponseWatch(sampled=self.watch, evictable=self.evictable)

    async def decide(self, request: RequestView, hold) -> Decision:
        self.seen.append(request)
        if self.holds is not None:
            await hold(self.holds)
            await asyncio.sleep(self.waits)
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
        Upstream(
            set_headers={"x-qos-tier": "p1"},
            remove_headers=("x-qos-spoof",),
            replace_body=b'{"short":1}',
        )
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
    with pytest.raises(ProtocolError, match="request_body is not expected"):
        await exchange.handle(request_body(BODY))
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
    assert [d.record.reason for d in seen] == ["decider_error"]


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
    seen = []
    admit = Admit(record=Admission(slot="s-1"))
    exchange = Exchange(Recording(admit, holds=4.0), on_decision=lambda d, s: seen.append(d))
    await exchange.handle(request_headers())
    answers = []

    async def send(answer):
        answers.append(answer)

    await exchange.answer(request_body(BODY), send)
    assert [a.WhichOneof("response") for a in answers] == [None, "request_body"]
    assert answers[0].override_message_timeout.ToTimedelta().total_seconds() == 5.0
    assert [d.record.slot for d in seen] == ["s-1"]
    assert exchange.admitted.record.slot == "s-1"
    assert exchange.phase is Phase.RESPONSE_HEADERS


@pytest.mark.asyncio
async def test_a_sampled_stream_has_its_body_watched_and_its_first_byte_timed():
    firsts = []
    exchange = Exchange(
        Recording(Admit(record=Admission(slot="s", tier="p0", time_first_byte=True)), watch=True),
        on_first_byte=lambda record, seconds: firsts.append((record.slot, seconds)),
    )
    await exchange.handle(request_headers())
    await exchange.handle(request_body(BODY))
    answer = await exchange.handle(response_headers())
    assert answer.mode_override.response_body_mode == ProcessingMode.STREAMED
    for chunk in (b"", b"data: 1\n\n"):  # an empty chunk carries no token
        await exchange.handle(
            ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(body=chunk))
        )
    assert [slot for slot, _ in firsts] == ["s"]  # at the first chunk with data
    # Timed: done, so the stream closes and Envoy sends the rest without the sidecar.
    assert firsts[0][1] >= 0 and exchange.phase is Phase.DONE


@pytest.mark.asyncio
async def test_a_sampled_request_that_does_not_stream_keeps_its_stream_past_admission():
    """Nothing to time, yet the stream stays open until the response begins: closed with
    the admission, a client gone before Envoy applied it would leave its slot held."""
    exchange = Exchange(Recording(Admit(record=Admission(slot="s", tier="p0")), watch=True))
    await exchange.handle(request_headers())
    answer = await exchange.handle(request_body(BODY))
    assert answer.WhichOneof("response") == "request_body"
    assert exchange.phase is Phase.RESPONSE_HEADERS
    answer = await exchange.handle(response_headers())
    assert answer.WhichOneof("response") == "response_headers"


@pytest.mark.asyncio
async def test_unsampled_streams_are_not_watched():
    exchange = Exchange(Recording(Admit(record=Admission(slot="s", tier="p0"))))
    await exchange.handle(request_headers())
    await exchange.handle(request_body(BODY))
    answer = await exchange.handle(response_headers())
    assert not answer.HasField("mode_override")


@pytest.mark.asyncio
async def test_envoy_is_asked_for_the_response_only_when_the_decider_watches_it():
    watched = Recording(Admit(record=Admission(slot="s")), watch=True)
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
    assert watched.seen[0].response_watched and exchange.response_watched

    unwatched = Recording(Admit(record=Admission(slot="s")), watch=False)
    exchange = Exchange(unwatched)
    answer = await exchange.handle(request_headers())
    assert not answer.HasField("mode_override")
    await exchange.handle(request_body(BODY))
    assert not unwatched.seen[0].response_watched and not exchange.response_watched


@pytest.mark.asyncio
async def test_a_refusal_after_a_hold_says_how_long_it_was_held_and_one_at_once_does_not():
    from sidecar.refusals import Reason

    refusal = Respond(status=200, body=b"{}", reason=Reason.SHED_TIER_BUDGET, tier="p1")
    seen = []
    for decider in (Recording(refusal, holds=4.0, waits=0.05), Recording(refusal)):
        exchange = Exchange(decider, on_decision=lambda d, s: seen.append(d))
        await exchange.handle(request_headers())

        async def send(answer):
            pass

        await exchange.answer(request_body(BODY), send)
    assert seen[0].waited >= 0.05
    assert seen[1].waited is None


@pytest.mark.asyncio
async def test_a_stream_gone_while_its_request_is_held_is_not_admitted_as_a_fault():
    """Envoy's stream fails the hold's write (the client went away): the failure is the
    stream's, as any write's; no decision is made, none counted, nothing fails open."""
    seen = []
    exchange = Exchange(Recording(Admit(), holds=4.0), on_decision=lambda d, s: seen.append(d))
    await exchange.handle(request_headers())

    async def gone(_answer):
        raise ConnectionResetError("the stream is closed")

    with pytest.raises(ConnectionResetError):
        await exchange.answer(request_body(BODY), gone)
    assert seen == [] and exchange.decision is None


class FollowAll:
    """Streams that may be ended early, as Evictions keeps them: every one followed."""

    def __init__(self) -> None:
        self.followed: dict[str, RunningStream] = {}
        self.ended: list[str] = []

    def follow(self, admitted: Admission, end) -> RunningStream:
        stream = RunningStream(admitted.slot, Tier.P2, "default", 0.0, 1.0, 16, end)
        self.followed[admitted.slot] = stream
        return stream


@pytest.mark.asyncio
async def test_a_followed_stream_passes_whole_events_and_ends_well_formed_when_evicted():
    follow = FollowAll()
    evictions = SimpleNamespace(follow=follow.follow, ended=follow.ended.append)
    admitted = Admit(record=Admission(slot="s", tier="p2", route="chat"))
    exchange = Exchange(Recording(admitted, evictable=True), evictions=evictions)
    sent: list[ext_proc.ProcessingResponse] = []

    async def send(message: ext_proc.ProcessingResponse) -> None:
        sent.append(message)

    await exchange.answer(request_headers(), send)
    await exchange.answer(request_body(BODY), send)
    sse = headers({":status": "200", "content-type": "text/event-stream"})
    await exchange.answer(ext_proc.ProcessingRequest(response_headers=sse), send)
    mode = sent[-1].mode_override
    assert mode.response_body_mode == ProcessingMode.FULL_DUPLEX_STREAMED
    assert mode.response_trailer_mode == ProcessingMode.SEND
    chunk = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    chunk += b'"choices":[{"index":0,"delta":{"content":"a"}}]}\n\ndata: {"id"'
    await exchange.answer(
        ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(body=chunk)), send
    )
    passed = sent[-1].response_body.response.body_mutation.streamed_response
    assert passed.body.endswith(b"}\n\n") and not passed.end_of_stream  # whole events only
    assert follow.followed["s"].flowing
    await exchange.evict()
    closing = sent[-1].response_body.response.body_mutation.streamed_response
    assert closing.end_of_stream and closing.body.endswith(b"data: [DONE]\n\n")
    assert b'"finish_reason":"load_shedding_evicted"' in closing.body
    assert b'"id":"c"' in closing.body  # the answer's own id
    assert exchange.phase is Phase.EVICTED
    # What Envoy still sends is let go, unanswered; ending it again does nothing.
    count = len(sent)
    late = ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(body=b"x"))
    await exchange.answer(late, send)
    await exchange.evict()
    assert len(sent) == count
    exchange.close()
    assert follow.ended == ["s"]


@pytest.mark.asyncio
async def test_only_streams_of_evictable_tiers_are_followed():
    admitted = Admit(record=Admission(slot="s", tier="p2", route="chat"))
    for evictable, content in ((False, "text/event-stream"), (True, "application/json")):
        follow = FollowAll()
        evictions = SimpleNamespace(follow=follow.follow, ended=follow.ended.append)
        exchange = Exchange(Recording(admitted, evictable=evictable), evictions=evictions)
        await exchange.handle(request_headers())
        await exchange.handle(request_body(BODY))
        answered = headers({":status": "200", "content-type": content})
        answer = await exchange.handle(ext_proc.ProcessingRequest(response_headers=answered))
        assert answer.mode_override.response_body_mode != ProcessingMode.FULL_DUPLEX_STREAMED
        assert follow.followed == {}
