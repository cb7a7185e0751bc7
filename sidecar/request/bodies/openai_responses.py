"""The OpenAI Responses API: `input` (a string or a list of items), `instructions`,
`max_output_tokens`, `stream`, `previous_response_id` (the server adds the stored
conversation to the prompt), `previous_input_messages` (vLLM's: a conversation carried
in the request), `tools`, `chat_template_kwargs` (their strings, as chat's). Its
streams always end with their usage."""

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
from sidecar.routes.kinds import RouteKind

# Item fields whose strings the model reads besides a message's content.
_ITEM_TEXTS = ("output", "arguments", "name")


def read_responses(body: dict[str, Any]) -> ParsedRequest:
    collected = Collected()
    instructions = optional(body, "instructions", str, "a string")
    if instructions:
        collected.texts.append(instructions)
    items = _input(body.get("input"), collected)
    # A conversation carried in the request (harmony messages, vLLM's), prompt as well.
    carried = bounded_list(body.get("previous_input_messages"), "previous_input_messages")
    for message in carried:
        collected.text_or_json(message)
    items += len(carried)
    optional(body, "stream", bool, "a boolean")
    previous = optional(body, "previous_response_id", str, "a string")
    collected.json(optional(body, "tools", list, "an array"))
    collected.strings(TemplateField.CHAT_TEMPLATE_KWARGS, body.get("chat_template_kwargs"))
    stream = body.get("stream") is True
    field = ("max_output_tokens",)
    return ParsedRequest(
        RouteKind.RESPONSES,
        body,
        ResponseShape(text=TextForm.RESPONSE, stream=stream, model=model_of(body)),
        Prompt(
            tuple(collected.texts),
            media=tuple(collected.media),
            stored_context=previous is not None,
            template_texts=tuple(collected.template_texts),
            template_overhead=TOKENS_PER_MESSAGE * items,
        ),
        OutputLimit((field,), positive_int(body, "max_output_tokens"), field),
        usage_in_stream=stream,
        prompt_param="input",
    )


def _input(value: Any, collected: Collected) -> int:
    """The items of `input`, read into `collected`; how many there are."""
    if value is None:
        raise InvalidRequest("'input' is required.", "input")
    if isinstance(value, str):
        collected.texts.append(value)
        return 1
    items = bounded_list(value, "input")
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict) or not (
            isinstance(item.get("type"), str) or isinstance(item.get("role"), str)
        ):
            raise InvalidRequest(f"'{where}' must be an object with a 'type' or a 'role'.", where)
        if "content" in item:
            collected.content(item["content"], f"{where}.content")
        for key in _ITEM_TEXTS:
            if isinstance(item.get(key), str):
                collected.texts.append(item[key])
        summary = item.get("summary")  # a reasoning item
        if isinstance(summary, list):
            collected.content(summary, f"{where}.summary")
    return len(items)
