"""Reading an exchange's end from Envoy's access-log entries, no servers."""

from __future__ import annotations

from envoy.data.accesslog.v3 import accesslog_pb2

from sidecar.completion.access_log import _exchange_end


def entry(metadata: dict | None = None, **request_headers: str):
    log = accesslog_pb2.HTTPAccessLogEntry()
    log.request.request_headers.update(request_headers)
    log.response.response_code.value = 200
    if metadata is not None:
        log.common_properties.metadata.filter_metadata["qos"].update(metadata)
    log.common_properties.time_to_last_downstream_tx_byte.FromMilliseconds(1500)
    return log


def test_the_slot_and_tier_come_from_the_decisions_metadata():
    end = _exchange_end(entry({"slot": "s-1", "tier": "p0", "queue_wait_ms": "3"}))
    assert (end.slot, end.tier, end.status, end.seconds_total) == ("s-1", "p0", 200, 1.5)
    assert end.seconds_to_first_byte is None  # not in the entry


def test_a_slot_a_client_sent_as_a_header_gives_nothing_back():
    # A shed request keeps the headers its client sent; only the sidecar sets metadata.
    assert _exchange_end(entry(None, **{"x-qos-slot": "s-1", "x-qos-tier": "p0"})) is None
    assert _exchange_end(entry({"tier": "p2"})) is None  # admitted without a slot
