"""Speaks ext_proc to a sidecar the way Envoy does, one stream per request: for tests and
benchmarks that drive a sidecar without an Envoy in front."""

from __future__ import annotations

import json
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc

from sidecar import envoy_auth


def http_headers(pairs: dict[str, str], end_of_stream: bool) -> ext_proc.HttpHeaders:
    """Headers as Envoy sends them (raw_value bytes)."""
    return ext_proc.HttpHeaders(
        headers=base_pb2.HeaderMap(
            headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
        ),
        end_of_stream=end_of_stream,
    )


class ExtProcClient:
    """`envoy_token`: what the sidecar asks of Envoy's streams (its QOS_ENVOY_TOKEN)."""

    def __init__(self, channel: grpc.aio.Channel, envoy_token: str = "") -> None:
        self._stub = ext_proc_grpc.ExternalProcessorStub(channel)
        self._metadata = ((envoy_auth.HEADER, envoy_token),) if envoy_token else None

    async def decide(
        self,
        body: dict[str, Any],
        api_key: str | None = None,
        path: str = "/v1/chat/completions",
    ) -> ext_proc.ProcessingResponse:
        """Send a POST's headers and body; the sidecar's answer to the body."""
        pairs = {":method": "POST", ":path": path, "content-type": "application/json"}
        if api_key:
            pairs["authorization"] = f"Bearer {api_key}"
        stream = self._stub.Process(metadata=self._metadata)
        try:
            await stream.write(
                ext_proc.ProcessingRequest(request_headers=http_headers(pairs, False))
            )
            await stream.read()
            await stream.write(
                ext_proc.ProcessingRequest(
                    request_body=ext_proc.HttpBody(
                        body=json.dumps(body).encode(), end_of_stream=True
                    )
                )
            )
            return await stream.read()
        finally:
            stream.cancel()


def admitted(answer: ext_proc.ProcessingResponse) -> bool:
    return bool(answer.WhichOneof("response") == "request_body")
