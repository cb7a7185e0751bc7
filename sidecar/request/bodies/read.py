"""A route's body, read by its API's reader: the one entry point admission calls."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from sidecar.request.bodies import anthropic, generic, openai, openai_responses
from sidecar.request.bodies.audio import read_audio
from sidecar.request.bodies.extras import read_extras
from sidecar.request.bodies.generate import read_generate
from sidecar.request.bodies.limits import parse_object
from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.routes.kinds import RouteKind
from sidecar.routes.table import Route

_JSON_READERS: dict[RouteKind, Callable[[dict[str, Any]], ParsedRequest]] = {
    RouteKind.CHAT: openai.read_chat,
    RouteKind.COMPLETIONS: openai.read_completions,
    RouteKind.CHAT_BATCH: openai.read_chat_batch,
    RouteKind.RESPONSES: openai_responses.read_responses,
    RouteKind.MESSAGES: anthropic.read_messages,
    RouteKind.COHERE_CHAT: generic.read_cohere_chat,
    RouteKind.INPUT_ONLY: generic.read_input_only,
}


def read(route: Route, raw: bytes, headers: Mapping[str, str]) -> ParsedRequest:
    """Raises InvalidRequest for a body the route's API cannot take."""
    if route.kind is RouteKind.AUDIO:
        return read_audio(raw, headers)
    body = parse_object(raw)
    if route.kind is RouteKind.GENERATE:
        parsed = read_generate(body, streams=route.path.endswith("_stream"))
    elif route.kind is RouteKind.INVOCATIONS:
        parsed = _invocation(body)
    else:
        parsed = _JSON_READERS[route.kind](body)
    extras = read_extras(body)
    return dataclasses.replace(parsed, extras=extras) if extras else parsed


def _invocation(body: dict[str, Any]) -> ParsedRequest:
    """SageMaker's /invocations: vLLM tries chat, then completion, then pooling bodies."""
    if "messages" in body:
        return openai.read_chat(body)
    if "prompt" in body:
        return openai.read_completions(body)
    return generic.read_input_only(body)
