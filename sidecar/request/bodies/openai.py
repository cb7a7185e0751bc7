"""OpenAI chat completions, completions, and vLLM's batch of chat conversations."""

from __future__ import annotations

from typing import Any

from sidecar.request.bodies.limits import MAX_TOKEN_IDS, bounded_list, model_of, positive_int
from sidecar.request.bodies.parsed import (
    OutputLimit,
    ParsedRequest,
    Prompt,
    ResponseShape,
    TextForm,
)
from sidecar.request.bodies.parts import Collected
from sidecar.request.openai_api.prompt import TOKENS_PER_MESSAGE, token_id_prompts
from sidecar.request.openai_api.request import CompletionRequest, Endpoint, InvalidRequest
from sidecar.request.openai_api.validate import validate, validate_messages
from sidecar.routes.kinds import RouteKind

# max_completion_tokens is the chat API's newer name for the same limit.
_CHAT_OUTPUT = (("max_completion_tokens",), ("max_tokens",))


def read_chat(body: dict[str, Any]) -> ParsedRequest:
    validate(CompletionRequest(Endpoint.CHAT, body))
    collected = Collected()
    messages = bounded_list(body.get("messages"), "messages")
    _conversation(collected, messages, "messages")
    collected.json(body.get("tools"))
    return _parsed(RouteKind.CHAT, body, collected, TOKENS_PER_MESSAGE * len(messages))


def read_completions(body: dict[str, Any]) -> ParsedRequest:
    validate(CompletionRequest(Endpoint.COMPLETIONS, body))
    collected = Collected()
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        collected.texts.append(prompt)
    elif isinstance(prompt, list):
        bounded_list(prompt, "prompt", most=MAX_TOKEN_IDS)
        collected.texts.extend(p for p in prompt if isinstance(p, str))
    return _parsed(RouteKind.COMPLETIONS, body, collected, token_id_prompts(prompt))


def read_chat_batch(body: dict[str, Any]) -> ParsedRequest:
    """`messages` is a list of conversations, each answered on its own (vLLM's
    /v1/chat/completions/batch): every one is counted, and asks for its own output."""
    conversations = bounded_list(body.get("messages"), "messages", required=True)
    if not conversations:
        raise InvalidRequest("'messages' must be a non-empty array of conversations.", "messages")
    collected = Collected()
    overhead = 0
    for index, conversation in enumerate(conversations):
        where = f"messages[{index}]"
        validate_messages(conversation, where)
        _conversation(collected, conversation, where)
        overhead += TOKENS_PER_MESSAGE * len(conversation)
    # The other fields are the chat API's.
    validate(CompletionRequest(Endpoint.CHAT, {**body, "messages": [{"role": "user"}]}))
    return _parsed(RouteKind.CHAT_BATCH, body, collected, overhead, len(conversations))


def _conversation(collected: Collected, messages: list[Any], where: str) -> None:
    for index, message in enumerate(bounded_list(messages, where)):
        if isinstance(message, dict):
            collected.content(message.get("content"), f"{where}[{index}].content")


def _parsed(
    kind: RouteKind, body: dict[str, Any], collected: Collected, fixed: int, answers: int = 1
) -> ParsedRequest:
    chat = kind is not RouteKind.COMPLETIONS
    fields = _CHAT_OUTPUT if chat else (("max_tokens",),)
    requested = None
    for (name,) in fields:
        requested = positive_int(body, name)
        if requested is not None:
            break
    stream = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    shape = ResponseShape(
        text=TextForm.CHAT if chat else TextForm.COMPLETION,
        stream=stream,
        include_usage=include_usage,
        model=model_of(body),
        choices=answers,
    )
    return ParsedRequest(
        kind,
        body,
        shape,
        Prompt(tuple(collected.texts), fixed, tuple(collected.media)),
        OutputLimit(fields, requested, ("max_tokens",), answers),
        usage_in_stream=include_usage,
        prompt_param="messages" if chat else "prompt",
    )
