"""An ended exchange's real cost against its reservation, from each source there is."""

from __future__ import annotations

from envoy.data.accesslog.v3 import accesslog_pb2

from sidecar.config.base import Tier
from sidecar.request.completion.access_log import ExchangeEnd
from sidecar.request.completion.settlement import settle
from sidecar.request.policy.cost import Charge, Reservation

CHARGE = Charge(prompt_tokens=20, expected_output=200, weight=1.0, output_weight=1.0)


def reservation(charge: Charge = CHARGE, sized: bool = True) -> Reservation:
    return Reservation(charge, (), True, "m", "default", Tier.P1, sized=sized)


def end(
    prompt: int | None = None,
    completion: int | None = None,
    size: int = 0,
    left: bool = False,
    status: int = 200,
    reset: bool = False,
) -> ExchangeEnd:
    flags = accesslog_pb2.ResponseFlags(
        downstream_connection_termination=left, upstream_remote_reset=reset
    )
    return ExchangeEnd("slot", "p1", status, flags, None, None, prompt, completion, size)


def test_a_whole_answer_is_settled_from_its_usage():
    settled = settle(False, reservation(), end(prompt=25, completion=50))
    assert (settled.output, settled.source) == (50, "usage")
    assert settled.difference == (25 + 50) - (20 + 200)  # given back
    assert settled.estimate_error is None


def test_a_whole_answer_without_usage_keeps_its_reservation():
    assert settle(False, reservation(), end()) is None  # the engine failed it


def test_a_whole_answer_its_client_left_pays_all_it_asked_for_beyond_its_reservation():
    held = Charge(
        prompt_tokens=20, expected_output=4000, weight=1.0, output_weight=1.0, ceiling=1250
    )
    settled = settle(False, reservation(held), end(left=True))
    assert (settled.output, settled.source) == (4000, "abandoned")
    assert settled.difference == (20 + 4000) - 1250  # owed: all it may have made


def test_a_stream_its_client_left_without_a_count_pays_all_it_asked_for():
    """Several choices stream no running count: the usage would have come at the end."""
    settled = settle(True, reservation(), end(size=2_000, left=True))
    assert (settled.output, settled.source) == (200, "abandoned")
    counted = settle(True, reservation(), end(completion=37, size=2_000, left=True))
    assert (counted.output, counted.source) == (37, "usage")  # the running count wins


def test_a_stream_without_usage_is_estimated_from_its_size_and_one_with_it_measures_that():
    estimated = settle(True, reservation(), end(size=20_000))
    assert estimated.source == "estimate" and estimated.output > 0
    measured = settle(True, reservation(), end(completion=estimated.output, size=20_000))
    assert measured.source == "usage" and measured.estimate_error == 0.0
    # A stream of another API's shape has no size estimate: no usage, nothing settled.
    assert settle(True, reservation(sized=False), end(size=20_000)) is None


def test_an_answer_with_no_output_is_settled_from_its_prompt():
    embeddings = Charge(prompt_tokens=1024, expected_output=0, weight=1.0, output_weight=0.0)
    settled = settle(False, reservation(embeddings), end(prompt=600))
    assert (settled.output, settled.difference) == (0, 600 - 1024)


def test_an_answer_refused_before_any_work_gets_its_whole_reservation_back():
    for stream in (False, True):
        # vLLM's error body is a few hundred bytes: no stream's size to estimate from.
        settled = settle(stream, reservation(), end(status=503, size=300))
        assert (settled.output, settled.source) == (0, "refused")
        assert settled.difference == -(20 + 200)
    # An engine that reset after it began, or a client that left, is no refusal.
    assert settle(False, reservation(), end(status=503, reset=True)) is None
    assert settle(False, reservation(), end(status=503, left=True)).source == "abandoned"
    # Another 5xx keeps the reservation, as a failed answer does.
    assert settle(False, reservation(), end(status=500)) is None
