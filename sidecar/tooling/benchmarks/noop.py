"""The do-nothing external processor: the floor of an Envoy + ext_proc architecture.

It speaks the same gRPC services as qos-sidecar (ext_proc and Envoy's access-log stream)
on the same Python gRPC runtime, and lets every message through unchanged without
looking at it. Envoy configured exactly as for qos-sidecar sends it the same messages, so
what qos-sidecar costs beyond it is the cost of its policy.

Run: .venv/bin/python -m sidecar.tooling.benchmarks.noop --port 50061
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import grpc
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sidecar import event_loop

# Each kind of message Envoy sends, answered with an empty response of the same kind.
CONTINUE = {
    "request_headers": ext_proc.ProcessingResponse(request_headers=ext_proc.HeadersResponse()),
    "request_body": ext_proc.ProcessingResponse(request_body=ext_proc.BodyResponse()),
    "request_trailers": ext_proc.ProcessingResponse(request_trailers=ext_proc.TrailersResponse()),
    "response_headers": ext_proc.ProcessingResponse(response_headers=ext_proc.HeadersResponse()),
    "response_body": ext_proc.ProcessingResponse(response_body=ext_proc.BodyResponse()),
    "response_trailers": ext_proc.ProcessingResponse(response_trailers=ext_proc.TrailersResponse()),
}


class ContinueEverything(ext_proc_grpc.ExternalProcessorServicer):
    async def Process(self, request_iterator, context):
        async for message in request_iterator:
            yield CONTINUE[message.WhichOneof("request")]


class DrainAccessLogs(als_pb2_grpc.AccessLogServiceServicer):
    async def StreamAccessLogs(self, request_iterator, context):
        async for _message in request_iterator:
            pass
        return als_pb2.StreamAccessLogsResponse()


async def serve_processor(
    port: int,
    processor: ext_proc_grpc.ExternalProcessorServicer,
    logs: als_pb2_grpc.AccessLogServiceServicer,
) -> None:
    """Serve both services and gRPC health on `port` until SIGINT or SIGTERM."""
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(processor, server)
    als_pb2_grpc.add_AccessLogServiceServicer_to_server(logs, server)
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await checks.set("", health_pb2.HealthCheckResponse.SERVING)
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop(1)


async def serve(port: int) -> None:
    await serve_processor(port, ContinueEverything(), DrainAccessLogs())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--event-loop", default="asyncio", choices=event_loop.LOOPS)
    args = parser.parse_args()
    event_loop.run(serve(args.port), args.event_loop)
