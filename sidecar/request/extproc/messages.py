"""Reading Envoy's ext_proc messages and building the answers to them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.type.v3 import http_status_pb2

from sidecar.request.policy.decision import Respond, Upstream
from sidecar.request.policy.tags import (
    EXCHANGE_NAMESPACE,
    GATEWAY_NAMESPACE,
    READS_USAGE_KEY,
    SLOT_KEY,
    USAGE_KEY,
)

_OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD

# Each kind of ProcessingRequest must be answered with the same kind of response.
_RESPONSE_TYPES = {
    "request_headers": ext_proc.HeadersResponse,
    "response_headers": ext_proc.HeadersResponse,
    "request_body": ext_proc.BodyResponse,
    "response_body": ext_proc.BodyResponse,
    "request_trailers": ext_proc.TrailersResponse,
    "response_trailers": ext_proc.TrailersResponse,
}


def header_dict(headers: ext_proc.HttpHeaders) -> dict[str, str]:
    """Header names lower-cased; repeated headers joined with ', ' as HTTP allows."""
    result: dict[str, str] = {}
    for header in headers.headers.headers:
        # Envoy sends raw_value (bytes) by default; value only under an old runtime flag.
        value = header.raw_value.decode("utf-8", "replace") if header.raw_value else header.value
        name = header.key.lower()
        result[name] = f"{result[name]}, {value}" if name in result else value
    return result


def fill_mutation(
    mutation: ext_proc.HeaderMutation,
    set_headers: Mapping[str, str],
    remove_headers: Iterable[str] = (),
) -> None:
    """Set and remove these headers in `mutation`, built in place: setting the fields of
    an added element costs a third of constructing each message and copying it in."""
    added = mutation.set_headers
    for name, value in set_headers.items():
        option = added.add(append_action=_OVERWRITE)
        option.header.key = name
        option.header.raw_value = value.encode()
    mutation.remove_headers.extend(remove_headers)


# Built once: gRPC serializes a message as it writes it, so one can be sent many times.
_CONTINUE = {
    kind: ext_proc.ProcessingResponse(**{kind: response()})
    for kind, response in _RESPONSE_TYPES.items()
}


def reads_usage(message: ext_proc.ProcessingRequest) -> bool:
    """Envoy's Lua filter reads (and edits) this exchange's streamed usage."""
    gateway = message.metadata_context.filter_metadata.get(GATEWAY_NAMESPACE)
    return gateway is not None and gateway.fields[READS_USAGE_KEY].bool_value


def continue_message(kind: str) -> ext_proc.ProcessingResponse:
    """Let the message of this kind through unchanged (shared: not to be changed)."""
    return _CONTINUE[kind]


def admit_message(kind: str, upstream: Upstream) -> ext_proc.ProcessingResponse:
    """Continue, applying the admission's header and body changes."""
    message = ext_proc.ProcessingResponse()
    common = getattr(message, kind).response
    common.SetInParent()  # present even when it changes nothing
    set_headers = upstream.set_headers
    if upstream.replace_body is not None:
        common.body_mutation.body = upstream.replace_body
        set_headers = {**set_headers, "content-length": str(len(upstream.replace_body))}
    if set_headers or upstream.remove_headers:
        fill_mutation(common.header_mutation, set_headers, upstream.remove_headers)
        # Envoy picked the route before asking us; a header it routes on has changed.
        common.clear_route_cache = upstream.reroute
    if upstream.slot or upstream.usage:
        exchange = message.dynamic_metadata.fields[EXCHANGE_NAMESPACE].struct_value
        if upstream.slot:
            exchange.fields[SLOT_KEY].string_value = upstream.slot
        if upstream.usage:
            exchange.fields[USAGE_KEY].string_value = upstream.usage
    return message


def watch_response_message() -> ext_proc.ProcessingResponse:
    """Continue the request headers, and send this exchange's response headers too (the
    filter's config skips them); the request body stays BUFFERED. Needs allow_mode_override."""
    return ext_proc.ProcessingResponse(
        request_headers=ext_proc.HeadersResponse(),
        mode_override=processing_mode_pb2.ProcessingMode(
            request_body_mode=processing_mode_pb2.ProcessingMode.BUFFERED,
            response_header_mode=processing_mode_pb2.ProcessingMode.SEND,
            response_body_mode=processing_mode_pb2.ProcessingMode.NONE,
        ),
    )


def watch_body_message() -> ext_proc.ProcessingResponse:
    """Continue the response headers, and send this response's body chunks too (to time
    the first token); needs allow_mode_override in the filter config."""
    return ext_proc.ProcessingResponse(
        response_headers=ext_proc.HeadersResponse(),
        mode_override=processing_mode_pb2.ProcessingMode(
            response_body_mode=processing_mode_pb2.ProcessingMode.STREAMED
        ),
    )


def follow_body_message() -> ext_proc.ProcessingResponse:
    """Continue the response headers, and have every chunk of the body pass through the
    sidecar (full duplex: what it sends back is what goes on, and it may end the body
    itself); the mode needs the trailers sent too. Needs allow_mode_override."""
    return ext_proc.ProcessingResponse(
        response_headers=ext_proc.HeadersResponse(),
        mode_override=processing_mode_pb2.ProcessingMode(
            response_body_mode=processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED,
            response_trailer_mode=processing_mode_pb2.ProcessingMode.SEND,
        ),
    )


def body_chunk_message(body: bytes, end_of_stream: bool) -> ext_proc.ProcessingResponse:
    """Part of a followed body, as it is to go on; `end_of_stream` ends it."""
    message = ext_proc.ProcessingResponse()
    streamed = message.response_body.response.body_mutation.streamed_response
    streamed.body = body
    streamed.end_of_stream = end_of_stream
    return message


def hold_message(seconds: float) -> ext_proc.ProcessingResponse:
    """Ask Envoy to wait this long for the answer to the current message (the request is
    queued); Envoy caps it at the filter's max_message_timeout."""
    response = ext_proc.ProcessingResponse()
    response.override_message_timeout.FromTimedelta(timedelta(seconds=seconds))
    return response


def immediate_message(respond: Respond) -> ext_proc.ProcessingResponse:
    """Answer the client from here; Envoy sends nothing upstream."""
    message = ext_proc.ProcessingResponse(
        immediate_response=ext_proc.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=respond.status),
            body=respond.body,
            details=f"qos_{respond.reason}",
        )
    )
    fill_mutation(message.immediate_response.headers, respond.headers)
    return message
