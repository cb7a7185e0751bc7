"""An ended exchange's real cost against what it reserved. Pure.

Exact from the answer's usage (Envoy lifted it into the access-log entry: a stream's
running count when its client left early). An answer its client left with no count (a
whole answer, or a stream of several choices, whose usage comes only at its end) is
charged its whole output: the engine may have made all it asked for before the
disconnect reached it, and never less than it made (the reservation may be less, held
to the buckets' burst). A stream that ended without usage is estimated from its size
(sidecar/request/completion/usage.py); another whole answer without usage (the engine
failed it) keeps its reservation. An answer with no output (embeddings) is settled from
its prompt's count alone. An answer refused before any work (503: every pod tried
refused it at its queue limit, or Envoy found none to send it to) costs nothing: its
reservation is given back whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

from envoy.data.accesslog.v3 import accesslog_pb2

from sidecar.request.completion.access_log import ExchangeEnd
from sidecar.request.completion.usage import streamed_output_tokens
from sidecar.request.policy.cost import Reservation

SERVICE_UNAVAILABLE = HTTPStatus.SERVICE_UNAVAILABLE.value


@dataclass(frozen=True)
class Settlement:
    output: int  # the answer's output tokens
    # "usage", "estimate", "abandoned" (a whole answer its client left) or "refused"
    source: str
    difference: float  # real cost minus the reservation: positive is owed
    # A stream that carried its usage says how far the size's estimate would be off:
    # (estimate - real) / real; None when there is nothing to compare.
    estimate_error: float | None = None


def settle(stream: bool, reservation: Reservation, end: ExchangeEnd) -> Settlement | None:
    if refused(end):
        return Settlement(0, "refused", reservation.charge.difference(0, 0))
    output, source = end.completion_tokens, "usage"
    if output is None and end.prompt_tokens is not None and not reservation.charge.expected_output:
        output = 0
    guess = None
    if stream and reservation.sized:
        guess = streamed_output_tokens(end.response_body_bytes, reservation.chat, reservation.model)
    error = None
    if output is None:
        if _client_left(end.response_flags) and reservation.charge.expected_output:
            # No count, and the engine may have made more than the client was sent.
            output, source = max(reservation.charge.expected_output, guess or 0), "abandoned"
        elif guess is not None:
            output, source = guess, "estimate"
        else:
            return None
    elif guess is not None and output > 0:
        error = (guess - output) / output
    difference = reservation.charge.difference(end.prompt_tokens, output)
    return Settlement(output, source, difference, error)


def refused(end: ExchangeEnd) -> bool:
    """Answered 503 with no work done: a model server's refusal at its queue limit (vLLM
    says so by its 503; Envoy tried one other pod), or no pod to send it to. One whose
    upstream reset after it began (a crashed engine, UR) or whose client left is not."""
    flags = end.response_flags
    return (
        end.status == SERVICE_UNAVAILABLE
        and end.completion_tokens is None
        and not flags.upstream_remote_reset
        and not _client_left(flags)
    )


def _client_left(flags: accesslog_pb2.ResponseFlags) -> bool:
    return bool(flags.downstream_connection_termination or flags.downstream_remote_reset)
