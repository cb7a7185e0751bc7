"""The conversation as the engine hands it to the chat template.

vLLM reads each message before rendering: a content's text parts joined by newlines
(or kept as parts, for a template that loops over them), a tool result's parts as one
string, an assistant's `reasoning` under both its names, a tool call's JSON arguments
parsed into an object (a malformed one becomes `{}`), a `developer` message turned into
`system` for a template that knows no developer. (`reasoning_content` is taken as
`reasoning`, the name vLLM reads.)
"""

from __future__ import annotations

import json
from typing import Any

from sidecar.request.counting.chat_form import Message

# The part types whose string is text to render, and the key it is under.
TEXT_PARTS = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "thinking": "thinking",
}


def template_messages(
    messages: list[Message], parts_as_list: bool, knows_developer: bool
) -> list[Message]:
    read = [_message(message, parts_as_list) for message in messages if isinstance(message, dict)]
    if not knows_developer and any(m["role"] == "developer" for m in read):
        read = _developer_as_system(read)
    return read


def _message(message: Message, parts_as_list: bool) -> Message:
    role = message.get("role")
    texts = list(_texts(message.get("content")))
    # A tool result's parts become one string, whatever the template.
    as_parts = parts_as_list and role != "tool"
    content: Any = [{"type": "text", "text": t} for t in texts] if as_parts else "\n".join(texts)
    read: Message = {"role": role, "content": content}
    if role == "assistant":
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            read["tool_calls"] = [_call(call) for call in calls]
        reasoning = message.get("reasoning", message.get("reasoning_content"))
        if reasoning is not None:
            read["reasoning"] = read["reasoning_content"] = reasoning
    elif role == "tool" and "tool_call_id" in message:
        read["tool_call_id"] = message["tool_call_id"]
    for key in ("name", "task"):
        if isinstance(message.get(key), str):
            read[key] = message[key]
    if role == "developer":
        read["tools"] = message.get("tools")
    return read


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    texts = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in TEXT_PARTS:
            text = part.get(TEXT_PARTS[part["type"]])
            if isinstance(text, str):
                texts.append(text)
    return texts


def _call(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    function = dict(call["function"])
    function["arguments"] = _arguments(function.get("arguments"))
    return {**call, "function": function}


def _arguments(arguments: Any) -> dict[str, Any]:
    """As an object: the engine parses a JSON string; anything else becomes `{}`."""
    if not arguments:
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def _developer_as_system(messages: list[Message]) -> list[Message]:
    """Developer messages become system ones; system messages anywhere but first are
    merged into one at the start."""
    converted = [
        {**{k: v for k, v in m.items() if k != "tools"}, "role": "system"}
        if m["role"] == "developer"
        else m
        for m in messages
    ]
    systems = [i for i, m in enumerate(converted) if m["role"] == "system"]
    if systems == [0]:
        return converted
    texts = [_system_text(m.get("content")) for m in converted if m["role"] == "system"]
    merged = {"role": "system", "content": "\n\n".join(t for t in texts if t)}
    return [merged, *(m for m in converted if m["role"] != "system")]


def _system_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and "text" in p)
    return content or ""
