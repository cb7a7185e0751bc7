"""Anthropic Messages: `system` (a string or text blocks), `messages` whose content is a
string or blocks (text, image, document, tool_use, tool_result, thinking), `max_tokens`
(required), `stream`, `tools`. Its streams always carry their usage."""

from __future__ import annotations

from typing import Any

from sidecar.config.template import TemplateField
from sidecar.request.bodies.limits import (
    InvalidRequest,
    bounded_list,
    model_of,
    optional,
    positive_int,
)
from sidecar.request.bodies.parsed import (
    OutputLimit,
    ParsedRequest,
    Prompt,
    ResponseShape,
    TextForm,
)
from sidecar.request.bodies.parts import Collected
from sidecar.request.bodies.tokens import TOKENS_PER_MESSAGE
from sidecar.routes.kinds import Api, RouteKind


def read_messages(body: dict[str, Any]) -> ParsedRequest:
    collected = Collected()
    collected.content(body.get("system"), "system")
    messages = bounded_list(body.get("messages"), "messages", required=True)
    if not messages:
        raise InvalidRequest("'messages' must be a non-empty array.", "messages")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidRequest(f"'{where}' must be an object with a 'role'.", where)
        collected.content(message.get("content"), f"{where}.content")
    collected.json(optional(body, "tools", list, "an array"))
    # vLLM's: the template's own arguments, their strings as chat's.
    collected.strings(TemplateField.CHAT_TEMPLATE_KWARGS, body.get("chat_template_kwargs"))
    optional(body, "stream", bool, "a boolean")
    max_tokens = positive_int(body, "max_tokens")
    if max_tokens is None:
        raise InvalidRequest("'max_tokens' is required.", "max_tokens")
    stream = body.get("stream") is True
    shape = ResponseShape(Api.ANTHROPIC, TextForm.MESSAGE, stream, model=model_of(body))
    return ParsedRequest(
        RouteKind.MESSAGES,
        body,
        shape,
        Prompt(
            tuple(collected.texts),
            media=tuple(collected.media),
            template_texts=tuple(collected.template_texts),
            template_overhead=TOKENS_PER_MESSAGE * len(messages),
        ),
        OutputLimit((("max_tokens",),), max_tokens, ("max_tokens",)),
        usage_in_stream=stream,
        body_priority=False,
    )
