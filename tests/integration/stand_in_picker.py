"""A stand-in for the endpoint picker (EPP) an Inference Extension gateway calls after
the sidecar: it sees each request's headers, sends the request to the one endpoint it is
given (the x-gateway-destination-endpoint header, which an ORIGINAL_DST cluster routes
by), and keeps what it saw."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from sidecar.ports import free_port
from sidecar.request.policy.scheduling import DESTINATION_HEADER
from sidecar.tooling.stack.admin_client import scrape


class StandInPicker(ext_proc_grpc.ExternalProcessorServicer):
    """Sees each request's headers, sends it to `endpoint`, keeps what it saw."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.seen: list[dict[str, str]] = []

    async def Process(self, request_iterator, context):
        async for message in request_iterator:
            headers = {h.key: h.raw_value.decode() for h in message.request_headers.headers.headers}
            self.seen.append(headers)
            picked = ext_proc.HeadersResponse()
            mutation = picked.response.header_mutation.set_headers.add()
            mutation.header.key = DESTINATION_HEADER
            mutation.header.raw_value = self.endpoint.encode()
            yield ext_proc.ProcessingResponse(request_headers=picked)


def generated(engine_url: str) -> float:
    """Tokens the engine has decoded (its counter, over its labels)."""
    samples = scrape(f"{engine_url}/metrics")
    return sum(v for k, v in samples.items() if k.startswith("vllm:generation_tokens_total"))


@contextlib.asynccontextmanager
async def running_picker(endpoint: str) -> AsyncIterator[tuple[StandInPicker, int]]:
    """A stand-in picker sending every request to `endpoint`, serving on a free port."""
    picker = StandInPicker(endpoint)
    server = grpc.aio.server()
    ext_proc_grpc.add_ExternalProcessorServicer_to_server(picker, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        yield picker, port
    finally:
        await server.stop(0)
