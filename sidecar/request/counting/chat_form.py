"""A request as the engine's chat endpoint takes it, whichever API it came in by.

vLLM serves the Anthropic Messages and OpenAI Responses APIs by turning each request into
a chat completion request and rendering that with the model's chat template. This does
the same turning, so that counting the rendered prompt counts what the engine renders:
system text first, a tool result as a `tool` message, a tool use as a tool call, thinking
and reasoning items as the message's `reasoning`, tools as chat tool schemas.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.routes.kinds import RouteKind

Message = dict[str, Any]


@dataclass(frozen=True)
class ChatForm:
    """What a chat template renders: the conversation and what comes beside it."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    documents: Any = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    # The request's own chat template, rendered instead of the model's (where its pool
    # allows one: config/extras.py).
    template: str | None = None


def chat_forms(parsed: ParsedRequest) -> list[ChatForm] | None:
    """The conversations the engine renders for this request (a batch renders one per
    conversation); None for a request it tokenizes as plain text."""
    body = parsed.body
    if parsed.kind is RouteKind.CHAT:
        return [from_chat(body, body["messages"])]
    if parsed.kind is RouteKind.CHAT_BATCH:
        return [from_chat(body, conversation) for conversation in body["messages"]]
    if parsed.kind is RouteKind.MESSAGES:
        return [from_messages(body)]
    if parsed.kind is RouteKind.RESPONSES:
        return [from_responses(body)]
    return None


def from_chat(body: dict[str, Any], messages: list[Message]) -> ChatForm:
    kwargs = dict(body.get("chat_template_kwargs") or {})
    effort = body.get("reasoning_effort")
    if effort is not None and "enable_thinking" not in kwargs:
        # vLLM turns thinking on for templates that ask, whenever reasoning is asked for.
        kwargs["enable_thinking"] = effort != "none"
    if effort is not None:
        kwargs.setdefault("reasoning_effort", effort)
    return ChatForm(
        messages=messages,
        tools=chat_tools(body.get("tools")),
        documents=body.get("documents"),
        template_kwargs=kwargs,
        add_generation_prompt=body.get("add_generation_prompt", True) is not False,
        continue_final_message=body.get("continue_final_message") is True,
        template=request_template(body),
    )


def request_template(body: dict[str, Any]) -> str | None:
    """The request's own chat template: `chat_template`, or in its template's arguments
    (vLLM takes either)."""
    template = body.get("chat_template")
    kwargs = body.get("chat_template_kwargs")
    if template is None and isinstance(kwargs, dict):
        template = kwargs.get("chat_template")
    return template if isinstance(template, str) else None


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Tool schemas as the engine hands them to the template: a function's name,
    description and parameters (null when not given), `strict` only when set."""
    if not isinstance(tools, list):
        return None
    return [_tool(tool.get("function", {})) for tool in tools if isinstance(tool, dict)]


def _tool(function: Any) -> dict[str, Any]:
    function = function if isinstance(function, dict) else {}
    schema = {
        "name": function.get("name"),
        "description": function.get("description"),
        "parameters": function.get("parameters"),
    }
    for optional in ("strict", "defer_loading"):
        if function.get(optional) is not None:
            schema[optional] = function[optional]
    return {"type": "function", "function": schema}


def from_messages(body: dict[str, Any]) -> ChatForm:
    """An Anthropic Messages request, turned into chat as vLLM turns it."""
    messages: list[Message] = []
    system = _system_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in body["messages"]:
        _anthropic_message(message, messages)
    kwargs = dict(body.get("chat_template_kwargs") or {})
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "disabled":
        kwargs.setdefault("enable_thinking", False)
        kwargs.setdefault("reasoning_effort", "none")
    return ChatForm(messages, _anthropic_tools(body.get("tools")), template_kwargs=kwargs)


def _anthropic_tools(tools: Any) -> list[dict[str, Any]] | None:
    if not isinstance(tools, list):
        return None
    return [
        _tool(
            {
                "name": tool.get("name"),
                "description": tool.get("description"),
                "parameters": tool.get("input_schema"),
                "strict": tool.get("strict"),
                "defer_loading": tool.get("defer_loading"),
            }
        )
        for tool in tools
        if isinstance(tool, dict)
    ]


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "".join(
            block["text"]
            for block in system
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        )
    return ""


def _anthropic_message(message: Message, into: list[Message]) -> None:
    role = message.get("role")
    content = message.get("content")
    chat: Message = {"role": role}
    if isinstance(content, str):
        chat["content"] = content
        into.append(chat)
        return
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for block in content if isinstance(content, list) else []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            reasoning.append(block["thinking"])
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {})
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name") or "", "arguments": arguments},
                }
            )
        elif kind == "tool_result":
            if role == "user":
                into.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.get("tool_use_id") or "",
                        "content": _tool_result_text(block.get("content")),
                    }
                )
            else:
                text = str(block.get("content")) if block.get("content") else ""
                parts.append({"type": "text", "text": f"Tool result: {text}"})
    if reasoning:
        chat["reasoning"] = "".join(reasoning)
    if calls:
        chat["tool_calls"] = calls
    if parts:
        only_text = len(parts) == 1 and parts[0]["type"] == "text"
        chat["content"] = parts[0]["text"] if only_text else parts
    if not (role == "user" and "content" not in chat):
        into.append(chat)


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            item.get("text", "")
            for item in content
            if isinstance(item, dict) and item.get("type") == "text"
        )
    return ""


def from_responses(body: dict[str, Any]) -> ChatForm:
    """A Responses request, turned into chat as vLLM turns it: instructions as the
    system message, then the input's items (a tool call joins the assistant message
    before it; a reasoning item is that message's reasoning)."""
    messages: list[Message] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body["input"]
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    else:
        for item in items:
            _response_item(item, messages)
    tools = [
        _tool({key: value for key, value in tool.items() if key != "type"})
        for tool in body.get("tools") or []
        if isinstance(tool, dict) and tool.get("type") == "function"
    ]
    last = items[-1] if isinstance(items, list) and items else None
    continues = (
        isinstance(last, dict)
        and last.get("type", "message") in ("message", "reasoning")
        and last.get("status") in ("in_progress", "incomplete")
    )
    return ChatForm(
        messages,
        tools or None,
        template_kwargs=dict(body.get("chat_template_kwargs") or {}),
        add_generation_prompt=not continues,
        continue_final_message=continues,
    )


def _response_item(item: Message, messages: list[Message]) -> None:
    previous = messages[-1] if messages and messages[-1].get("role") == "assistant" else None
    kind = item.get("type")
    if kind == "function_call":
        call = {
            "id": item.get("call_id"),
            "type": "function",
            "function": {"name": item.get("name"), "arguments": item.get("arguments")},
        }
        if previous is not None and isinstance(previous.get("tool_calls", []), list):
            previous.setdefault("tool_calls", []).append(call)
            return
        messages.append({"role": "assistant", "tool_calls": [call]})
        return
    if kind == "reasoning":
        content, summary = item.get("content") or [], item.get("summary") or []
        texts = content or summary
        reasoning = texts[0].get("text", "") if texts else ""
        if previous is not None and previous.get("reasoning") is None:
            previous["reasoning"] = reasoning
            return
        messages.append({"role": "assistant", "reasoning": reasoning})
        return
    if kind == "function_call_output":
        messages.append(
            {"role": "tool", "content": item.get("output"), "tool_call_id": item.get("call_id")}
        )
        return
    if item.get("role") == "assistant":
        content = item.get("content")
        text = content if isinstance(content, str) else None
        if isinstance(content, list) and content and isinstance(content[0], dict):
            text = content[0].get("text")
        if text is not None:
            if previous is not None and previous.get("content") is None:
                previous["content"] = text
                return
            messages.append({"role": "assistant", "content": text})
            return
    if "role" in item:
        messages.append(dict(item))
