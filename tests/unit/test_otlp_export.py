"""The sidecar's own OTLP encoding and exporters: the same request OpenTelemetry's own
encoder makes (decoded with OpenTelemetry's protos), sent over OTLP/HTTP and OTLP/gRPC to
receivers on loopback, configured by the standard variables."""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import ClassVar

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sidecar.ports import free_port
from sidecar.request.extproc.otlp_encode import export_request
from sidecar.request.extproc.otlp_export import (
    GrpcExporter,
    HttpExporter,
    OtlpSettingInvalid,
    OtlpTarget,
    exporter,
)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def finished_spans() -> tuple[ReadableSpan, ...]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "qos-sidecar"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("qos-sidecar", "0.1.0")
    parent = TraceContextTextMapPropagator().extract({"traceparent": TRACEPARENT})
    with tracer.start_as_current_span(
        "qos.decision", context=parent, kind=trace.SpanKind.SERVER
    ) as span:
        span.set_attributes({"qos.tier": "p1", "qos.cost": 12, "qos.ok": True, "qos.s": 0.25})
        span.set_attribute("qos.stages", ["identity", "budget"])
        span.add_event("budget", {"qos.tokens": 40})
        span.set_status(trace.Status(trace.StatusCode.ERROR, "shed"))
    with tracer.start_as_current_span("internal"):
        pass
    return memory.get_finished_spans()


def test_the_export_request_is_what_opentelemetrys_encoder_makes():
    spans = finished_spans()
    ours = ExportTraceServiceRequest.FromString(export_request(spans).SerializeToString())
    assert ours == encode_spans(spans)
    (decision, internal) = ours.resource_spans[0].scope_spans[0].spans
    assert decision.parent_span_id.hex() == "00f067aa0ba902b7"
    assert decision.trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert internal.kind == internal.SPAN_KIND_INTERNAL and not internal.parent_span_id


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, OtlpTarget("http/protobuf", "http://localhost:4318/v1/traces")),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/", "OTEL_EXPORTER_OTLP_TIMEOUT": "2"},
            OtlpTarget("http/protobuf", "http://c:4318/v1/traces", timeout=2.0),
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://t:443/x",
                "OTEL_EXPORTER_OTLP_HEADERS": "Api-Key=a%20b, x=1",
                "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
            },
            OtlpTarget(
                "http/protobuf", "https://t:443/x", (("api-key", "a b"), ("x", "1")), gzip=True
            ),
        ),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"},
            OtlpTarget("grpc", "http://c:4317"),
        ),
    ],
)
def test_the_target_is_read_as_opentelemetry_documents_it(environment, expected):
    assert OtlpTarget.from_environment(environment) == expected


@pytest.mark.parametrize(
    "environment",
    [
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
        {"OTEL_EXPORTER_OTLP_COMPRESSION": "brotli"},
        {"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"},
        {"OTEL_EXPORTER_OTLP_HEADERS": "no-equals-sign"},
    ],
)
def test_a_setting_it_cannot_follow_is_refused_by_name(environment):
    (name,) = environment
    with pytest.raises(OtlpSettingInvalid, match=name):
        OtlpTarget.from_environment(environment)


class _Receiver(http.server.BaseHTTPRequestHandler):
    # Each test's own lists (the fixture makes a subclass): what arrived, what to answer.
    received: ClassVar[list[tuple[dict[str, str], bytes]]] = []
    statuses: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 200:
            self.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_receiver() -> Iterator[tuple[int, type[_Receiver]]]:
    handler = type("Receiver", (_Receiver,), {"received": [], "statuses": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler
    server.shutdown()
    server.server_close()


def test_http_sends_protobuf_with_the_headers_and_gzip_retrying_a_503(http_receiver):
    port, handler = http_receiver
    handler.statuses.append(503)  # the first attempt: "try again"
    target = OtlpTarget(
        "http/protobuf", f"http://127.0.0.1:{port}/v1/traces", (("api-key", "k"),), 5.0, True
    )
    sender = exporter(target)
    assert isinstance(sender, HttpExporter)
    spans = finished_spans()
    assert sender.export(spans) is SpanExportResult.SUCCESS
    ((headers, body),) = handler.received
    assert headers["content-type"] == "application/x-protobuf" and headers["api-key"] == "k"
    assert headers["content-encoding"] == "gzip"
    assert ExportTraceServiceRequest.FromString(gzip.decompress(body)) == encode_spans(spans)


def test_http_gives_up_on_a_refusal_at_once(http_receiver):
    port, handler = http_receiver
    handler.statuses.append(400)
    sender = exporter(OtlpTarget("http/protobuf", f"http://127.0.0.1:{port}/v1/traces"))
    assert sender.export(finished_spans()) is SpanExportResult.FAILURE
    assert handler.received == []


def test_grpc_calls_opentelemetrys_trace_service_with_the_headers():
    received: list[tuple[ExportTraceServiceRequest, dict[str, str]]] = []

    def export(request: ExportTraceServiceRequest, context: grpc.ServicerContext):
        received.append((request, dict(context.invocation_metadata())))
        return ExportTraceServiceResponse()

    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {
            "Export": grpc.unary_unary_rpc_method_handler(
                export,
                request_deserializer=ExportTraceServiceRequest.FromString,
                response_serializer=ExportTraceServiceResponse.SerializeToString,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        sender = exporter(OtlpTarget("grpc", f"http://127.0.0.1:{port}", (("api-key", "k"),)))
        assert isinstance(sender, GrpcExporter)
        spans = finished_spans()
        assert sender.export(spans) is SpanExportResult.SUCCESS
        sender.shutdown()
    finally:
        server.stop(None)
    ((request, metadata),) = received
    assert request == encode_spans(spans) and metadata["api-key"] == "k"
