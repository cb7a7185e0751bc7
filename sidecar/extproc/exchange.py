"""One HTTP exchange as Envoy streams it to us: an explicit state machine.

    REQUEST_HEADERS ──(end_of_stream)──────────────┐
          │                                         ▼
          └──▶ REQUEST_BODY ──(end_of_stream)──▶ decide ──Respond──▶ DONE
                                                    │
                                                  Admit
                                                    ▼
                           RESPONSE_HEADERS ──▶ RESPONSE_BODY ──(end_of_stream)──▶ DONE

The decision is taken once, when the whole request is known: at the headers when the
request has no body, else at the end of the (BUFFERED) body. Any message that does not
fit the current phase is a protocol error: the processing mode in Envoy's config does
not match what this sidecar expects.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable

from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc

from sidecar.extproc import messages
from sidecar.policy.decision import Admit, Decider, Decision, RequestView

log = logging.getLogger(__name__)


class Phase(enum.Enum):
    REQUEST_HEADERS = "request_headers"
    REQUEST_BODY = "request_body"
    RESPONSE_HEADERS = "response_headers"
    RESPONSE_BODY = "response_body"
    DONE = "done"


class ProtocolError(Exception):
    """Envoy sent a message the current phase does not allow."""


class Exchange:
    def __init__(
        self,
        decider: Decider,
        on_decision: Callable[[Decision, float], None] | None = None,
    ) -> None:
        self._decider = decider
        self._on_decision = on_decision
        self.phase = Phase.REQUEST_HEADERS
        self.request_headers: dict[str, str] = {}
        self.response_status: int | None = None
        self.decision: Decision | None = None
        self.decision_seconds: float | None = None
        self._body = bytearray()

    async def handle(self, message: ext_proc.ProcessingRequest) -> ext_proc.ProcessingResponse:
        kind = message.WhichOneof("request")
        handler = _HANDLERS.get((self.phase, kind))
        if handler is None:
            raise ProtocolError(f"{kind} is not expected in phase {self.phase.value}")
        return await handler(self, getattr(message, kind))

    @property
    def method(self) -> str:
        return self.request_headers.get(":method", "")

    @property
    def path(self) -> str:
        return self.request_headers.get(":path", "")

    async def _on_request_headers(self, headers: ext_proc.HttpHeaders):
        self.request_headers = messages.header_dict(headers)
        if headers.end_of_stream:
            return await self._decide("request_headers", body=None)
        self.phase = Phase.REQUEST_BODY
        return messages.continue_message("request_headers")

    async def _on_request_body(self, body: ext_proc.HttpBody):
        self._body += body.body
        if not body.end_of_stream:  # STREAMED mode: keep collecting
            return messages.continue_message("request_body")
        return await self._decide("request_body", body=bytes(self._body))

    async def _on_request_trailers(self, _trailers: ext_proc.HttpTrailers):
        # Trailers end a body that had no end_of_stream: the request is complete.
        response = await self._decide("request_body", body=bytes(self._body))
        if response.WhichOneof("response") == "request_body":
            return messages.continue_message("request_trailers")
        return response

    async def _on_response_headers(self, headers: ext_proc.HttpHeaders):
        status = messages.header_dict(headers).get(":status", "")
        self.response_status = int(status) if status.isdigit() else None
        self.phase = Phase.DONE if headers.end_of_stream else Phase.RESPONSE_BODY
        return messages.continue_message("response_headers")

    async def _on_response_body(self, body: ext_proc.HttpBody):
        if body.end_of_stream:
            self.phase = Phase.DONE
        return messages.continue_message("response_body")

    async def _on_response_trailers(self, _trailers: ext_proc.HttpTrailers):
        self.phase = Phase.DONE
        return messages.continue_message("response_trailers")

    async def _decide(self, kind: str, body: bytes | None) -> ext_proc.ProcessingResponse:
        view = RequestView(self.method, self.path, self.request_headers, body)
        started = time.perf_counter()
        try:
            self.decision = await self._decider.decide(view)
        except Exception:
            # A fault of ours must not cost the client its request: fail open, as Envoy's
            # failure_mode_allow does when the sidecar is unreachable.
            log.exception("decider failed; admitting", extra={"path": self.path})
            self.decision = Admit(reason="decider_error")
        self.decision_seconds = time.perf_counter() - started
        if self._on_decision is not None:
            self._on_decision(self.decision, self.decision_seconds)
        if isinstance(self.decision, Admit):
            self.phase = Phase.RESPONSE_HEADERS
            return messages.admit_message(kind, self.decision)
        self.phase = Phase.DONE
        return messages.immediate_message(self.decision)


_HANDLERS = {
    (Phase.REQUEST_HEADERS, "request_headers"): Exchange._on_request_headers,
    (Phase.REQUEST_BODY, "request_body"): Exchange._on_request_body,
    (Phase.REQUEST_BODY, "request_trailers"): Exchange._on_request_trailers,
    (Phase.RESPONSE_HEADERS, "response_headers"): Exchange._on_response_headers,
    (Phase.RESPONSE_BODY, "response_body"): Exchange._on_response_body,
    (Phase.RESPONSE_BODY, "response_trailers"): Exchange._on_response_trailers,
}
