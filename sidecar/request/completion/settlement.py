"""An ended exchange's real cost against what it reserved. Pure.

Exact from the answer's usage (Envoy lifted it into the access-log entry), estimated from
a stream's size otherwise (sidecar/request/completion/usage.py). A whole answer whose usage never
came (the client left) keeps its reservation: the GPU may have done the work. An answer
with no output (embeddings) is settled from its prompt's count alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.request.completion.access_log import ExchangeEnd
from sidecar.request.completion.usage import streamed_output_tokens
from sidecar.request.policy.cost import Reservation


@dataclass(frozen=True)
class Settlement:
    output: int  # the answer's output tokens
    source: str  # "usage" or "estimate"
    difference: float  # real cost minus the reservation: positive is owed
    # A stream that carried its usage says how far the size's estimate would be off:
    # (estimate - real) / real; None when there is nothing to compare.
    estimate_error: float | None = None


def settle(stream: bool, reservation: Reservation, end: ExchangeEnd) -> Settlement | None:
    output, source = end.completion_tokens, "usage"
    if output is None and end.prompt_tokens is not None and not reservation.charge.expected_output:
        output = 0
    guess = None
    if stream and reservation.sized:
        guess = streamed_output_tokens(end.response_body_bytes, reservation.chat, reservation.model)
    error = None
    if output is None:
        if guess is None:
            return None
        output, source = guess, "estimate"
    elif guess is not None and output > 0:
        error = (guess - output) / output
    difference = reservation.charge.difference(end.prompt_tokens, output)
    return Settlement(output, source, difference, error)
