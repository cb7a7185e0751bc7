"""Sending the decisions' spans to an OTLP receiver: OTLP/HTTP (protobuf) or OTLP/gRPC,
configured by OpenTelemetry's standard environment variables.

The sidecar encodes the spans itself (otlp_encode.py) instead of through the
opentelemetry-exporter-otlp packages: those import OpenTelemetry's protos by their
module names, and xds-protos (the Envoy protos the sidecar is built on) installs an older
copy of those modules over them, so on a plain `pip install` the exporter failed to
import. Read, per signal first (`OTEL_EXPORTER_OTLP_TRACES_*`), then for all
(`OTEL_EXPORTER_OTLP_*`): `PROTOCOL` (http/protobuf, the default, or grpc), `ENDPOINT`,
`HEADERS` (key=value,...), `TIMEOUT` (seconds, as OpenTelemetry's Python exporters read
it; default 10), `COMPRESSION` (gzip or none), `CERTIFICATE` (the CA for https), and for
gRPC `OTEL_EXPORTER_OTLP_INSECURE`.
"""

from __future__ import annotations

import gzip
import logging
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from sidecar.generated.qos.otlp.v1 import trace_pb2 as otlp
from sidecar.request.extproc.otlp_encode import export_request

log = logging.getLogger(__name__)

PROTOCOLS = ("http/protobuf", "grpc")
_GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# Worth another try (OTLP's retryable answers), within the export's timeout.
_RETRY_HTTP = {429, 502, 503, 504}
_RETRY_GRPC = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
}


class OtlpSettingInvalid(ValueError):
    pass


@dataclass(frozen=True)
class OtlpTarget:
    """Where and how the spans go, resolved once from the environment."""

    protocol: str
    endpoint: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = 10.0
    gzip: bool = False
    certificate: str = ""
    insecure: bool = False

    @classmethod
    def from_environment(cls, environment: Mapping[str, str]) -> OtlpTarget:
        def read(name: str, default: str = "") -> str:
            for variable in (f"OTEL_EXPORTER_OTLP_TRACES_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
                if environment.get(variable, "").strip():
                    return environment[variable].strip()
            return default

        protocol = read("PROTOCOL", "http/protobuf")
        if protocol not in PROTOCOLS:
            raise OtlpSettingInvalid(
                f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: http/protobuf or grpc"
            )
        compression = read("COMPRESSION", "none").lower()
        if compression not in ("gzip", "none"):
            raise OtlpSettingInvalid(
                f"OTEL_EXPORTER_OTLP_COMPRESSION={compression!r}: gzip or none"
            )
        try:
            timeout = float(read("TIMEOUT", "10"))
        except ValueError:
            raise OtlpSettingInvalid(f"OTEL_EXPORTER_OTLP_TIMEOUT={read('TIMEOUT')!r}") from None
        return cls(
            protocol=protocol,
            endpoint=_endpoint(protocol, environment),
            headers=_headers(read("HEADERS")),
            timeout=timeout,
            gzip=compression == "gzip",
            certificate=read("CERTIFICATE"),
            insecure=read("INSECURE", "false").lower() == "true",
        )


def _endpoint(protocol: str, environment: Mapping[str, str]) -> str:
    own = environment.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    shared = environment.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if protocol == "grpc":
        return own or shared or "http://localhost:4317"
    if own:
        return own  # the signal's own endpoint is used as it is
    return (shared or "http://localhost:4318").rstrip("/") + "/v1/traces"


def _headers(raw: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise OtlpSettingInvalid(f"OTEL_EXPORTER_OTLP_HEADERS: {item!r} is not key=value")
        pairs.append(
            (urllib.parse.unquote(key.strip()).lower(), urllib.parse.unquote(value.strip()))
        )
    return tuple(pairs)


def exporter(target: OtlpTarget) -> SpanExporter:
    return GrpcExporter(target) if target.protocol == "grpc" else HttpExporter(target)


class _Retrying(SpanExporter):
    """Sends each batch, again after a back-off while the receiver says to retry, until
    the target's timeout; the spans of a batch that never went are dropped, and said."""

    def __init__(self, target: OtlpTarget) -> None:
        self.target = target
        self._shut = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shut:
            return SpanExportResult.FAILURE
        payload = export_request(spans).SerializeToString()
        deadline = time.monotonic() + self.target.timeout
        delay = 0.5
        while True:
            problem, retry = self._send(payload, max(0.1, deadline - time.monotonic()))
            if problem is None:
                return SpanExportResult.SUCCESS
            if not retry or time.monotonic() + delay >= deadline:
                log.warning(
                    "%d spans not exported to %s: %s", len(spans), self.target.endpoint, problem
                )
                return SpanExportResult.FAILURE
            time.sleep(delay)  # the exporter's own thread (BatchSpanProcessor's)
            delay *= 2

    def _send(self, payload: bytes, seconds: float) -> tuple[str | None, bool]:
        """What went wrong (None: nothing), and whether it is worth another try."""
        raise NotImplementedError

    def shutdown(self) -> None:
        self._shut = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # nothing is held here: the processor holds the batches


class HttpExporter(_Retrying):
    def __init__(self, target: OtlpTarget) -> None:
        super().__init__(target)
        self._context = (
            ssl.create_default_context(cafile=target.certificate) if target.certificate else None
        )

    def _send(self, payload: bytes, seconds: float) -> tuple[str | None, bool]:
        headers = {**dict(self.target.headers), "Content-Type": "application/x-protobuf"}
        if self.target.gzip:
            payload = gzip.compress(payload)
            headers["Content-Encoding"] = "gzip"
        request = urllib.request.Request(self.target.endpoint, payload, headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=seconds, context=self._context) as answer:
                _partial(otlp.ExportTraceServiceResponse.FromString(answer.read()))
                return None, False
        except urllib.error.HTTPError as error:
            return f"HTTP {error.code}", error.code in _RETRY_HTTP
        except (urllib.error.URLError, OSError) as error:
            return str(error), True


class GrpcExporter(_Retrying):
    def __init__(self, target: OtlpTarget) -> None:
        super().__init__(target)
        parsed = urllib.parse.urlsplit(target.endpoint)
        address = parsed.netloc or target.endpoint
        if parsed.scheme == "http" or (parsed.scheme != "https" and target.insecure):
            self._channel = grpc.insecure_channel(address)
        else:
            roots = Path(target.certificate).read_bytes() if target.certificate else None
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(roots))
        self._export = self._channel.unary_unary(
            _GRPC_METHOD,
            request_serializer=lambda payload: payload,
            response_deserializer=otlp.ExportTraceServiceResponse.FromString,
        )

    def _send(self, payload: bytes, seconds: float) -> tuple[str | None, bool]:
        compression = grpc.Compression.Gzip if self.target.gzip else None
        try:
            answer = self._export(
                payload, timeout=seconds, metadata=self.target.headers, compression=compression
            )
        except grpc.RpcError as error:
            code = error.code()
            return f"gRPC {code.name}", code in _RETRY_GRPC
        _partial(answer)
        return None, False

    def shutdown(self) -> None:
        super().shutdown()
        self._channel.close()


def _partial(answer: otlp.ExportTraceServiceResponse) -> None:
    rejected = answer.partial_success.rejected_spans
    if rejected:
        log.warning(
            "the OTLP receiver rejected %d spans: %s",
            rejected,
            answer.partial_success.error_message,
        )
