"""Which gRPC calls come from the gateway's own Envoy.

ext_proc (every prompt and API key), the access log (it gives slots back and settles
output) and the runtime layer (the mode) are Envoy's alone. Envoy proves itself with a
shared token it sends as gRPC metadata on every stream to the sidecar's cluster: the
shipped configs add `x-qos-envoy-token: %ENVIRONMENT(QOS_ENVOY_TOKEN)%` there (an
upstream header filter), so the token comes from Envoy's environment, as a Secret gives
it, never from a config file. A sidecar without a token serves these services only on a
loopback address: then the machine (in Kubernetes, the pod) is the boundary. A gateway
that cannot add metadata to its gRPC streams (Envoy Gateway's proxies) proves itself
instead with its TLS client certificate: one the port's client CA verified that names
the DNS name the sidecar is given (QOS_ENVOY_CLIENT_NAME) among its SANs.

A call without the token is refused before any servicer sees it, counted and logged.
An ext_proc stream so refused is answered, not failed: Envoy would let a request through
unmetered after a gRPC error on a route that fails open, so a misconfigured Envoy gets
503s, not a free pass.
"""

from __future__ import annotations

import hmac
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.type.v3 import http_status_pb2

from sidecar.addresses import is_loopback

log = logging.getLogger(__name__)

HEADER = "x-qos-envoy-token"
ENV = "QOS_ENVOY_TOKEN"

# Envoy's services, by their gRPC names, and the label their refusals are counted under.
SERVICES = {
    "envoy.service.ext_proc.v3.ExternalProcessor": "ext_proc",
    "envoy.service.accesslog.v3.AccessLogService": "access_log",
    "envoy.service.runtime.v3.RuntimeDiscoveryService": "runtime",
}

_LOG_EVERY_SECONDS = 60.0

# What a refused ext_proc stream answers: the gateway cannot decide, as when it is away.
# Envoy's own local reply for an undecided request (envoy.yaml) says the same.
_UNDECIDED = ext_proc.ProcessingResponse(
    immediate_response=ext_proc.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=503),
        body=(
            b'{"error":{"message":"The gateway cannot decide on this request now. Retry '
            b'shortly.","type":"server_error","code":"qos_unavailable"}}'
        ),
        details="qos_envoy_unauthenticated",
    )
)
_UNDECIDED.immediate_response.headers.set_headers.add().header.MergeFrom(
    base_pb2.HeaderValue(key="content-type", raw_value=b"application/json")
)


CLIENT_NAME_ENV = "QOS_ENVOY_CLIENT_NAME"
# Where gRPC's auth context lists a verified peer certificate's SANs.
_SANS = "x509_subject_alternative_name"


@dataclass(frozen=True)
class EnvoyCredential:
    """The token Envoy presents ("" when the sidecar listens on loopback only and takes
    every local caller for its Envoy), and the name a client certificate may prove it by
    instead ("" for none)."""

    token: str
    client_name: str = ""

    @classmethod
    def for_listener(
        cls, token: str, grpc_host: str, client_name: str = "", client_ca: bool = False
    ) -> EnvoyCredential:
        if not token and not is_loopback(grpc_host):
            raise SystemExit(
                f"--grpc-host {grpc_host} is reachable from other machines: set {ENV} here "
                "and in Envoy's environment, so that only Envoy may call ext_proc, the "
                "access log and the runtime layer"
            )
        if client_name and not client_ca:
            raise SystemExit(
                f"{CLIENT_NAME_ENV} names Envoy's client certificate, which only a port "
                "verifying client certificates can see: set --tls-client-ca-file"
            )
        return cls(token, client_name)

    def names_client(self, context: grpc.aio.ServicerContext) -> bool:
        """Whether the caller's verified certificate names Envoy's client name."""
        if not self.client_name:
            return False
        return self.client_name.encode() in context.auth_context().get(_SANS, ())

    def refusal(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
        """Why a call with this metadata is not Envoy's ("missing", "wrong"), or None."""
        if not self.token:
            return None
        given = next((value for key, value in metadata or () if key == HEADER), None)
        if given is None:
            return "missing"
        raw = given if isinstance(given, bytes) else given.encode()
        return None if hmac.compare_digest(raw, self.token.encode()) else "wrong"


@dataclass
class _Refusals:
    """Counts each refusal and logs the first of a kind, then one line a minute."""

    counted: Callable[[str, str], None]
    _since: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)

    def note(self, service: str, reason: str, peer: str) -> None:
        self.counted(service, reason)
        key = (service, reason)
        logged_at, skipped = self._since.get(key, (float("-inf"), 0))
        now = time.monotonic()
        if now - logged_at < _LOG_EVERY_SECONDS:
            self._since[key] = (logged_at, skipped + 1)
            return
        self._since[key] = (now, 0)
        log.warning(
            "gRPC call refused: not from this gateway's Envoy (%s token)",
            reason,
            extra={"service": service, "peer": peer, "refused_since_last_line": skipped},
        )


class EnvoyOnly(grpc.aio.ServerInterceptor):
    """Lets through to Envoy's services only calls with the credential."""

    def __init__(self, credential: EnvoyCredential, counted: Callable[[str, str], None]):
        self._credential = credential
        self._refusals = _Refusals(counted)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        service = SERVICES.get(handler_call_details.method.split("/")[1])
        if service is None:
            return await continuation(handler_call_details)
        reason = self._credential.refusal(handler_call_details.invocation_metadata)
        if reason is None:
            return await continuation(handler_call_details)
        refused = _refusing(service, reason, self._refusals)
        if not self._credential.client_name:
            return refused
        # No token: Envoy still, if its certificate says so (seen only once the call runs).
        handler = await continuation(handler_call_details)
        return _either(handler, refused, self._credential.names_client)


def _either(
    handler: grpc.RpcMethodHandler,
    refused: grpc.RpcMethodHandler,
    accepted: Callable[[grpc.aio.ServicerContext], bool],
) -> grpc.RpcMethodHandler:
    """`handler` for a caller `accepted` takes, `refused` for any other."""
    streaming = handler.stream_stream is not None
    served = handler.stream_stream if streaming else handler.stream_unary
    refusing = refused.stream_stream if streaming else refused.stream_unary

    if inspect.isasyncgenfunction(served):

        async def either(requests: Any, context: grpc.aio.ServicerContext) -> Any:
            if not accepted(context):
                await refusing(requests, context)  # aborts the call
                return
            async for response in served(requests, context):
                yield response

    else:

        async def either(requests: Any, context: grpc.aio.ServicerContext) -> Any:  # type: ignore[misc]
            chosen = served if accepted(context) else refusing
            return await chosen(requests, context)

    make = (
        grpc.stream_stream_rpc_method_handler if streaming else grpc.stream_unary_rpc_method_handler
    )
    return make(
        either,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _refusing(service: str, reason: str, refusals: _Refusals) -> grpc.RpcMethodHandler:
    async def refuse(_request: Any, context: grpc.aio.ServicerContext) -> None:
        refusals.note(service, reason, context.peer())
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{reason} {HEADER}")

    async def answer_undecided(
        _requests: AsyncIterator[ext_proc.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> None:
        refusals.note(service, reason, context.peer())
        if await context.read() is not grpc.aio.EOF:
            await context.write(_UNDECIDED)

    if service == "ext_proc":
        return grpc.stream_stream_rpc_method_handler(
            answer_undecided,
            request_deserializer=ext_proc.ProcessingRequest.FromString,
            response_serializer=ext_proc.ProcessingResponse.SerializeToString,
        )
    if service == "access_log":
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.stream_stream_rpc_method_handler(refuse)
