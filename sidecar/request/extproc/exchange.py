"""One HTTP exchange as Envoy streams it to us: an explicit state machine.

    REQUEST_HEADERS ──(end_of_stream)──────────────┐
          │                                         ▼
          └──▶ REQUEST_BODY ──(end_of_stream)──▶ decide ──Respond──▶ DONE
                                                 │    ▲
                                               Admit  └── held: Envoy is told to wait
                                                 ▼         for the decision
                           RESPONSE_HEADERS ──▶ RESPONSE_BODY ──(end_of_stream)──▶ DONE
                                   │
                                   └──▶ FOLLOWED ──(end_of_stream)──▶ DONE
                                          └──(evicted)──▶ EVICTED

The decision is taken once, when the whole request is known: at the headers when the
request has no body, else at the end of the (BUFFERED) body. Envoy sends the response
phases only for the sample of exchanges the sidecar asks for at the request headers
(mode_override), to time their first token; once it has come, the sidecar closes the
stream and Envoy sends the rest of the answer on without it. The others cost no round
trip after the decision; every exchange's end is learnt from the access log. A held
request is answered twice: first with override_message_timeout, when the decider says it
will wait (so Envoy waits past its message timeout), then with the decision. Any message
that does not fit the current phase is a protocol error: the processing mode in Envoy's
config does not match this sidecar's.

A stream of a tier whose streams may be ended early (eviction on) is followed: its body
passes through the sidecar chunk by chunk (full duplex), whole events only
(answers/stream_end.py), so that the sidecar can end it at any time with its API's
closing events; Envoy then resets its upstream and the engine drops it. What comes from
Envoy after that is let go unanswered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Awaitable, Callable

from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from sidecar.request.answers.stream_end import StreamTail
from sidecar.request.bodies.parsed import TextForm
from sidecar.request.eviction.evictions import Evictions
from sidecar.request.eviction.streams import RunningStream
from sidecar.request.extproc import messages
from sidecar.request.extproc.tracing import DecisionTracer, NoTracing
from sidecar.request.policy.decision import (
    Admission,
    Admit,
    Admitted,
    Decider,
    Decision,
    Hold,
    RequestView,
    Respond,
)

log = logging.getLogger(__name__)
NO_TRACING = NoTracing()

# Envoy is told to wait this much longer than the hold itself, for the final answer.
HOLD_MARGIN_SECONDS = 1.0


class Phase(enum.Enum):
    REQUEST_HEADERS = "request_headers"
    REQUEST_BODY = "request_body"
    RESPONSE_HEADERS = "response_headers"
    RESPONSE_BODY = "response_body"
    FOLLOWED = "followed"  # every chunk of its body through the sidecar
    EVICTED = "evicted"  # ended early by the sidecar
    DONE = "done"


# The routes whose streams can be closed early, and how each closes.
_CLOSES = {
    "chat": TextForm.CHAT,
    "completions": TextForm.COMPLETION,
    "responses": TextForm.RESPONSE,
    "messages": TextForm.MESSAGE,
}


class ProtocolError(Exception):
    """Envoy sent a message the current phase does not allow."""


class _HoldNotSent(Exception):
    """Envoy's stream took no message while the request was being held (the client or
    Envoy went away): nothing is left to decide, and it is no fault of the decider's."""


# Sends one response to Envoy (the stream's write): coroutines, not async generators, all
# the way down, as an async generator costs its loop a registration of its own.
Send = Callable[[ext_proc.ProcessingResponse], Awaitable[object]]


class Exchange:
    def __init__(
        self,
        decider: Decider,
        on_decision: Callable[[Decision, float], None] | None = None,
        on_first_byte: Callable[[Admission, float], None] | None = None,
        tracer: DecisionTracer = NO_TRACING,
        evictions: Evictions | None = None,
    ) -> None:
        self._decider = decider
        self._on_decision = on_decision
        self._on_first_byte = on_first_byte
        self._tracer = tracer
        self._evictions = evictions
        self.started = time.monotonic()  # the stream opens as the request arrives
        self.first_byte_after: float | None = None
        self.phase = Phase.REQUEST_HEADERS
        self.request_headers: dict[str, str] = {}
        self.response_status: int | None = None
        self.response_watched = False  # its first token is timed (a sample)
        self.evict_watched = False  # its response is to be followed, should it be a stream
        self.reads_usage = False  # Envoy's Lua filter reads streamed usage
        self.decision: Decision | None = None
        self.decision_seconds: float | None = None
        # BUFFERED: the whole body in one message, decided on as it came (protobuf's
        # bytes, not copied again); STREAMED: its chunks, joined once at the end.
        self._chunks: list[bytes] = []
        # A followed stream: what passed of it, its entry among the streams that may be
        # ended, and the stream to Envoy, written from two tasks (it and an eviction).
        self._tail: StreamTail | None = None
        self._followed: RunningStream | None = None
        self._send: Send | None = None
        self._writing = asyncio.Lock()

    async def answer(self, message: ext_proc.ProcessingRequest, send: Send) -> None:
        """Send the responses to one message from Envoy: one, or two for a held request."""
        kind = message.WhichOneof("request")
        handler = _HANDLERS.get((self.phase, kind))
        if handler is None:
            raise ProtocolError(f"{kind} is not expected in phase {self.phase.value}")
        if kind == "request_headers":
            self.reads_usage = messages.reads_usage(message)
        await handler(self, getattr(message, kind), send)

    async def handle(self, message: ext_proc.ProcessingRequest) -> ext_proc.ProcessingResponse:
        """The final response to one message (a held request's wait included)."""
        answers: list[ext_proc.ProcessingResponse] = []

        async def keep(answer: ext_proc.ProcessingResponse) -> None:
            answers.append(answer)

        await self.answer(message, keep)
        return answers[-1]

    @property
    def method(self) -> str:
        return self.request_headers.get(":method", "")

    @property
    def path(self) -> str:
        return self.request_headers.get(":path", "")

    @property
    def admitted(self) -> Admit | None:
        return self.decision if isinstance(self.decision, Admit) else None

    async def _on_request_headers(self, headers: ext_proc.HttpHeaders, send: Send) -> None:
        self.request_headers = messages.header_dict(headers)
        if headers.end_of_stream:
            await self._decide("request_headers", None, send)
            return
        self.phase = Phase.REQUEST_BODY
        # Responses are not sent by default (a round trip each): ask for a sample, and
        # for those of the tiers whose streams may be ended early.
        watch = self._decider.watch_response(self.request_headers)
        self.response_watched, self.evict_watched = watch.sampled, watch.evictable
        if watch:
            await send(messages.watch_response_message())
        else:
            await send(messages.continue_message("request_headers"))

    async def _on_request_body(self, body: ext_proc.HttpBody, send: Send) -> None:
        self._chunks.append(body.body)
        if not body.end_of_stream:  # STREAMED mode: keep collecting
            await send(messages.continue_message("request_body"))
            return
        await self._decide("request_body", self._whole_body(), send)

    def _whole_body(self) -> bytes:
        return self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)

    async def _on_request_trailers(self, _trailers: ext_proc.HttpTrailers, send: Send) -> None:
        # Trailers end a body that had no end_of_stream: the request is complete.
        async def as_trailers(answer: ext_proc.ProcessingResponse) -> None:
            if answer.WhichOneof("response") == "request_body":
                answer = messages.continue_message("request_trailers")
            await send(answer)

        await self._decide("request_body", self._whole_body(), as_trailers)

    async def _on_response_headers(self, headers: ext_proc.HttpHeaders, send: Send) -> None:
        response = messages.header_dict(headers)
        status = response.get(":status", "")
        self.response_status = int(status) if status.isdigit() else None
        self.phase = Phase.DONE if headers.end_of_stream else Phase.RESPONSE_BODY
        admitted = self.admitted
        if admitted and self.phase is Phase.RESPONSE_BODY and self._follows(admitted, response):
            self.phase = Phase.FOLLOWED
            self._send = send
            await send(messages.follow_body_message())
        elif admitted and admitted.record.time_first_byte and self.phase is Phase.RESPONSE_BODY:
            await send(messages.watch_body_message())
        else:
            await send(messages.continue_message("response_headers"))

    def _follows(self, admitted: Admit, response: dict[str, str]) -> bool:
        """Whether to follow this response: a stream (server-sent events, answered 200)
        of an API it can close, of a tier whose streams may be ended early."""
        form = _CLOSES.get(admitted.record.route)
        if (
            not self.evict_watched
            or self._evictions is None
            or form is None
            or self.response_status != 200
            or not response.get("content-type", "").startswith("text/event-stream")
        ):
            return False
        self._followed = self._evictions.follow(admitted.record, self.evict)
        if self._followed is None:
            return False
        self._tail = StreamTail(form)
        return True

    async def _on_followed_body(self, body: ext_proc.HttpBody, send: Send) -> None:
        tail, followed = self._tail, self._followed
        assert tail is not None and followed is not None
        self._time_first_byte(body)
        passed = tail.feed(body.body)
        followed.flowing = True
        if body.end_of_stream:
            passed += tail.flush()
            self.phase = Phase.DONE
            self.close()
        followed.tokens = tail.tokens
        async with self._writing:
            await send(messages.body_chunk_message(passed, body.end_of_stream))

    async def _on_followed_trailers(self, _trailers: ext_proc.HttpTrailers, send: Send) -> None:
        # Trailers end a body that had no end_of_stream: what was held back goes first.
        assert self._tail is not None
        held = self._tail.flush()
        self.phase = Phase.DONE
        self.close()
        async with self._writing:
            if held:
                await send(messages.body_chunk_message(held, False))
            await send(messages.continue_message("response_trailers"))

    async def _let_go(self, _message: object, _send: Send) -> None:
        """After an eviction: what Envoy still sends is not answered."""

    async def evict(self) -> None:
        """End the followed stream now, well-formed: its API's closing events, then the
        end of the body; Envoy resets the upstream, so the engine drops the request."""
        async with self._writing:
            if self.phase is not Phase.FOLLOWED or self._send is None or self._tail is None:
                return
            self.phase = Phase.EVICTED
            try:
                await self._send(messages.body_chunk_message(self._tail.end(), True))
            except Exception as error:  # the exchange went away meanwhile: nothing to end
                log.debug("a stream ended early was gone already: %s", error)

    def close(self) -> None:
        """The exchange is over for the sidecar: a followed stream is no longer one."""
        if self._followed is not None and self._evictions is not None:
            self._evictions.ended(self._followed.slot)
            self._followed = None

    def _time_first_byte(self, body: ext_proc.HttpBody) -> None:
        if body.body and self.first_byte_after is None:
            # Time to first token, as the client sees it: queue, prefill, first chunk.
            self.first_byte_after = time.monotonic() - self.started
            admitted = self.admitted
            if self._on_first_byte is not None and admitted and admitted.record.time_first_byte:
                self._on_first_byte(admitted.record, self.first_byte_after)

    async def _on_response_body(self, body: ext_proc.HttpBody, send: Send) -> None:
        self._time_first_byte(body)
        # Timed: the rest of the stream is none of our business. Done, the stream to Envoy
        # closes after this answer and Envoy sends the other chunks on without us (each
        # would cost a message); the access log still tells the exchange's end.
        if body.end_of_stream or self.first_byte_after is not None:
            self.phase = Phase.DONE
        await send(messages.continue_message("response_body"))

    async def _on_response_trailers(self, _trailers: ext_proc.HttpTrailers, send: Send) -> None:
        self.phase = Phase.DONE
        await send(messages.continue_message("response_trailers"))

    async def _decide(self, kind: str, body: bytes | None, send: Send) -> None:
        view = RequestView(
            self.method,
            self.path,
            self.request_headers,
            body,
            self.response_watched,
            self.reads_usage,
        )
        started = time.perf_counter()
        held_at: float | None = None

        async def hold(seconds: float) -> None:
            nonlocal held_at
            held_at = time.perf_counter()
            try:
                await send(messages.hold_message(seconds + HOLD_MARGIN_SECONDS))
            except Exception as error:
                raise _HoldNotSent from error

        with self._tracer.span(view) as traced:
            decision = await self._ask(view, hold)
            if isinstance(decision, Respond) and held_at is not None:
                decision = dataclasses.replace(decision, waited=time.perf_counter() - held_at)
            seconds = time.perf_counter() - started
            decision = traced.finish(decision, seconds)
        self.decision = decision
        self.decision_seconds = seconds
        try:
            await self._send_decision(kind, decision, send)
        finally:
            # Counted and logged once the answer is on its way, not within its latency.
            if self._on_decision is not None:
                self._on_decision(decision, seconds)

    async def _send_decision(self, kind: str, decision: Decision, send: Send) -> None:
        if isinstance(decision, Admit):
            # Open at least until the response begins, even with nothing to time: closed
            # now, a client gone before Envoy applied the admission would leave its slot
            # named nowhere (the access log carries the slot only once applied).
            self.phase = Phase.RESPONSE_HEADERS
            await send(messages.admit_message(kind, decision.upstream))
        else:
            self.phase = Phase.DONE
            await send(messages.immediate_message(decision))

    async def _ask(self, view: RequestView, hold: Hold) -> Decision:
        try:
            return await self._decider.decide(view, hold)
        except _HoldNotSent as gone:
            assert gone.__cause__ is not None
            raise gone.__cause__ from None  # the stream's own failure, as any write's
        except Exception:
            # A fault of ours must not cost the client its request: fail open, as Envoy's
            # failure_mode_allow does when the sidecar is unreachable.
            log.exception("decider failed; admitting", extra={"path": self.path})
            return Admit(record=Admission(reason=Admitted.DECIDER_ERROR))


_HANDLERS = {
    (Phase.REQUEST_HEADERS, "request_headers"): Exchange._on_request_headers,
    (Phase.REQUEST_BODY, "request_body"): Exchange._on_request_body,
    (Phase.REQUEST_BODY, "request_trailers"): Exchange._on_request_trailers,
    (Phase.RESPONSE_HEADERS, "response_headers"): Exchange._on_response_headers,
    (Phase.RESPONSE_BODY, "response_body"): Exchange._on_response_body,
    (Phase.RESPONSE_BODY, "response_trailers"): Exchange._on_response_trailers,
    (Phase.FOLLOWED, "response_body"): Exchange._on_followed_body,
    (Phase.FOLLOWED, "response_trailers"): Exchange._on_followed_trailers,
    (Phase.EVICTED, "response_body"): Exchange._let_go,
    (Phase.EVICTED, "response_trailers"): Exchange._let_go,
}
