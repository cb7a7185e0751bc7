"""OpenAI chat completions, completions, and vLLM's batch of chat conversations, checked
the way the API would before any GPU sees them: only what admission relies on or what
would make vLLM fail; fields not known here pass through untouched for vLLM to judge."""

from __future__ import annotations

from typing import Any

from sidecar.config.template import TemplateField
from sidecar.request.bodies.embeds import embedding_rows
from sidecar.request.bodies.limits import (
    MAX_TOKEN_IDS,
    InvalidRequest,
    bounded_list,
    model_of,
    positive_int,
)
from sidecar.request.bodies.parsed import (
    OutputLimit,
    ParsedRequest,
    Prompt,
    ResponseShape,
    StreamUsage,
    TextForm,
)
from sidecar.request.bodies.parts import Collected, compact_json
from sidecar.request.bodies.tokens import TOKENS_PER_MESSAGE, token_id_prompts
from sidecar.routes.kinds import RouteKind

# max_completion_tokens is the chat API's newer name for the same limit.
_CHAT_OUTPUT = (("max_completion_tokens",), ("max_tokens",))


def read_chat(body: dict[str, Any]) -> ParsedRequest:
    _check(body, chat=True)
    collected = Collected()
    messages = body["messages"]  # a non-empty list (_check); bounded by _conversation
    _conversation(collected, messages, "messages")
    _template_inputs(collected, body)
    overhead = TOKENS_PER_MESSAGE * len(messages)
    return _parsed(RouteKind.CHAT, body, collected, 0, _answers(body), overhead)


def read_completions(body: dict[str, Any]) -> ParsedRequest:
    _check(body, chat=False)
    collected = Collected()
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        collected.texts.append(prompt)
    elif isinstance(prompt, list):
        bounded_list(prompt, "prompt", most=MAX_TOKEN_IDS)
        collected.texts.extend(p for p in prompt if isinstance(p, str))
    # Fill-in-the-middle: the text after the gap is rendered into the prompt too.
    suffix = body.get("suffix")
    if isinstance(suffix, str):
        collected.texts.append(suffix)
    # Each prompt of a list (of strings, or of token-id lists) is completed on its own,
    # and so is each tensor of prompt_embeds: a token a row.
    prompts = 0 if prompt is None else 1
    if isinstance(prompt, list) and not _is_int(prompt[0]):
        prompts = len(prompt)
    embedded = _embedded_prompts(body.get("prompt_embeds"))
    fixed = token_id_prompts(prompt) + sum(embedded)
    answers = _answers(body, prompts + len(embedded))
    return _parsed(RouteKind.COMPLETIONS, body, collected, fixed, answers)


def _embedded_prompts(value: Any) -> list[int]:
    """The rows of each tensor of `prompt_embeds` (one, or a list)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [embedding_rows(value, "prompt_embeds")]
    entries = bounded_list(value, "prompt_embeds")
    return [embedding_rows(entry, f"prompt_embeds[{i}]") for i, entry in enumerate(entries)]


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
        _check_messages(conversation, where)
        _conversation(collected, conversation, where)
        overhead += TOKENS_PER_MESSAGE * len(conversation)
    # The other fields are the chat API's.
    _check({**body, "messages": [{"role": "user"}]}, chat=True)
    _template_inputs(collected, body)
    answers = _answers(body, len(conversations))
    return _parsed(RouteKind.CHAT_BATCH, body, collected, 0, answers, overhead)


def _answers(body: dict[str, Any], prompts: int = 1) -> int:
    """The answers the engine generates: `n` of each prompt, or `best_of` when larger
    (it generates them all and returns the best `n`)."""
    if body.get("n") is None and body.get("best_of") is None:  # the usual request
        return prompts
    return max(positive_int(body, "n") or 1, positive_int(body, "best_of") or 1) * prompts


# A message's fields besides its content that chat templates may render into the prompt.
_MESSAGE_TEXTS = {
    "name": TemplateField.NAME,
    "reasoning_content": TemplateField.REASONING,
    "reasoning": TemplateField.REASONING,
    "tool_call_id": TemplateField.TOOL_CALL_ID,
}


def _conversation(collected: Collected, messages: list[Any], where: str) -> None:
    """Every field of each message a chat template renders: its content, its name, its
    reasoning, the tool calls it made (their names and arguments)."""
    for index, message in enumerate(bounded_list(messages, where)):
        if not isinstance(message, dict):
            continue
        collected.content(message.get("content"), f"{where}[{index}].content")
        collected.template_fields(message, _MESSAGE_TEXTS)
        calls = message.get("tool_calls")
        legacy = message.get("function_call")
        if calls is None and legacy is None:
            continue
        for call in [*bounded_list(calls, f"{where}[{index}].tool_calls"), legacy]:
            function = call.get("function", call) if isinstance(call, dict) else None
            if isinstance(function, dict):
                if isinstance(function.get("name"), str):
                    collected.texts.append(function["name"])
                if function.get("arguments") is not None:
                    collected.text_or_json(function["arguments"])


def _template_inputs(collected: Collected, body: dict[str, Any]) -> None:
    """What the chat template renders from outside the messages: tool schemas, documents
    (retrieval), and the strings among the template's own arguments."""
    collected.json(body.get("tools"))
    # A request's own chat template (where the pool allows one): its text, as if
    # rendered once; exact counts render it.
    if isinstance(body.get("chat_template"), str):
        collected.texts.append(body["chat_template"])
    documents = body.get("documents")
    if documents:
        collected.template_texts.append((TemplateField.DOCUMENTS, compact_json(documents)))
    collected.strings(TemplateField.CHAT_TEMPLATE_KWARGS, body.get("chat_template_kwargs"))


def _parsed(
    kind: RouteKind,
    body: dict[str, Any],
    collected: Collected,
    fixed: int,
    answers: int = 1,
    overhead: int = 0,
) -> ParsedRequest:
    chat = kind is not RouteKind.COMPLETIONS
    fields = _CHAT_OUTPUT if chat else (("max_tokens",),)
    requested = None
    for (name,) in fields:
        requested = body.get(name)  # an integer of at least 1 (_check)
        if requested is not None:
            break
    stream = body.get("stream") is True
    stream_usage = StreamUsage.asked(body.get("stream_options")) if stream else None
    include_usage = stream_usage is not None and stream_usage.final
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
        Prompt(
            tuple(collected.texts),
            fixed,
            tuple(collected.media),
            template_texts=tuple(collected.template_texts),
            template_overhead=overhead,
        ),
        OutputLimit(fields, requested, ("max_tokens",), answers),
        usage_in_stream=include_usage,
        stream_usage=stream_usage,
        prompt_param="messages" if chat else "prompt",
    )


# Fields of both APIs, and the type each must have when given.
_TYPED = (
    ("model", str, "a string"),
    ("stream", bool, "a boolean"),
    ("stream_options", dict, "an object"),
    ("tools", list, "an array"),
)


def _check(body: dict[str, Any], chat: bool) -> None:
    for key, kind, described in _TYPED:
        value = body.get(key)
        if value is not None and not isinstance(value, kind):
            raise InvalidRequest(f"'{key}' must be {described}.", key)
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (not _is_int(value) or value < 1):
            raise InvalidRequest(f"'{key}' must be an integer of at least 1.", key)
    if chat:
        _check_messages(body.get("messages"))
    elif body.get("prompt") is not None or body.get("prompt_embeds") in (None, "", []):
        _check_prompt(body.get("prompt"))  # unless prompt_embeds are the prompts


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_messages(messages: Any, name: str = "messages") -> None:
    if messages is None:
        raise InvalidRequest(f"'{name}' is required.", name)
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest(f"'{name}' must be a non-empty array.", name)
    for index, message in enumerate(messages):
        if isinstance(message, dict) and isinstance(message.get("role"), str):
            content = message.get("content")
            if content is None or isinstance(content, str):
                continue  # the usual message: nothing to name
        where = f"{name}[{index}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"'{where}' must be an object.", where)
        if not isinstance(message.get("role"), str):
            raise InvalidRequest(f"'{where}.role' must be a string.", f"{where}.role")
        if not isinstance(content, list):
            raise InvalidRequest(
                f"'{where}.content' must be a string or an array of parts.", f"{where}.content"
            )
        for part_index, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                part_where = f"{where}.content[{part_index}]"
                raise InvalidRequest(f"'{part_where}' must be an object with a 'type'.", part_where)


def _check_prompt(prompt: Any) -> None:
    if prompt is None:
        raise InvalidRequest("'prompt' is required.", "prompt")
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt) or all(_is_int(p) for p in prompt):
            return
        if all(isinstance(p, list) and p and all(_is_int(t) for t in p) for p in prompt):
            return
    raise InvalidRequest(
        "'prompt' must be a string, an array of strings, or an array of token ids.", "prompt"
    )
