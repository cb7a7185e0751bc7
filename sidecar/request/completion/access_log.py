"""Envoy's gRPC access-log stream: how the sidecar learns that an exchange has ended.

Envoy writes one entry per HTTP exchange when it ends — completed, client gone, upstream
reset, timed out — carrying the request headers the sidecar set and the slot it put in
the exchange's metadata (policy/tags.py). The entry gives the slot back. It arrives a
millisecond or so after the end and costs no latency on the way of the response
(bench/completion_signal.py measures the options).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from google.protobuf import duration_pb2, struct_pb2

from sidecar.request.policy.tags import EXCHANGE_NAMESPACE, SLOT_KEY

log = logging.getLogger(__name__)

# Where envoy.yaml's json_to_metadata filter puts a whole answer's usage.
USAGE_NAMESPACE = "qos"


@dataclass(frozen=True)
class ExchangeEnd:
    slot: str
    tier: str
    status: int
    response_flags: accesslog_pb2.ResponseFlags
    seconds_to_first_byte: float | None  # upstream's first byte to the client
    seconds_total: float | None
    # The answer's usage when Envoy lifted it (a whole JSON answer), else None.
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    response_body_bytes: int = 0  # what went to the client, for an estimate otherwise


class AccessLogReceiver(als_pb2_grpc.AccessLogServiceServicer):
    def __init__(self, on_end: Callable[[ExchangeEnd], None]) -> None:
        self._on_end = on_end
        self.entries = 0

    async def StreamAccessLogs(
        self,
        request_iterator: AsyncIterator[als_pb2.StreamAccessLogsMessage],
        context: grpc.aio.ServicerContext,
    ) -> als_pb2.StreamAccessLogsResponse:
        async for message in request_iterator:
            for entry in message.http_logs.log_entry:
                self.entries += 1
                end = _exchange_end(entry)
                if end is not None:
                    try:
                        self._on_end(end)
                    except Exception:  # one bad entry must not cost the stream
                        log.exception("handling an access-log entry failed")
        return als_pb2.StreamAccessLogsResponse()


def _seconds(duration: duration_pb2.Duration) -> float | None:
    # Its fields read directly: ToNanoseconds() and ByteSize() are Python-level calls.
    seconds, nanos = duration.seconds, duration.nanos
    return seconds + nanos / 1e9 if seconds or nanos else None


def _exchange_end(entry: accesslog_pb2.HTTPAccessLogEntry) -> ExchangeEnd | None:
    common = entry.common_properties
    slot = _slot(common.metadata.filter_metadata.get(EXCHANGE_NAMESPACE))
    if not slot:
        return None  # not admitted through a slot (shed, or passed through)
    headers = entry.request.request_headers
    usage = common.metadata.filter_metadata.get(USAGE_NAMESPACE)
    return ExchangeEnd(
        slot=slot,
        tier=headers.get("x-qos-tier", ""),
        status=entry.response.response_code.value,
        response_flags=common.response_flags,
        seconds_to_first_byte=_seconds(common.time_to_first_downstream_tx_byte),
        seconds_total=_seconds(common.time_to_last_downstream_tx_byte),
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        response_body_bytes=entry.response.response_body_bytes,
    )


def _slot(exchange: struct_pb2.Struct | None) -> str:
    if exchange is None or SLOT_KEY not in exchange.fields:
        return ""
    return str(exchange.fields[SLOT_KEY].string_value)


def _count(usage: struct_pb2.Struct | None, key: str) -> int | None:
    """A usage count Envoy's json_to_metadata filter put in the entry's metadata."""
    if usage is None or key not in usage.fields:
        return None
    value = usage.fields[key]
    if value.WhichOneof("kind") != "number_value" or value.number_value < 0:
        return None
    return int(value.number_value)
