"""Requests of every API the engine renders a prompt for, with what chat templates render
beside `content`: tool schemas, tool calls and results, names, reasoning, documents, the
template's own arguments, continued answers, token ids. Each is (path, body)."""

from __future__ import annotations

import json

THOUGHT = (
    "The customer asks about order 4411. The tracking service says it shipped on Monday "
    "from the Basel warehouse, so with standard delivery it should arrive by Friday. "
    "Rain in Zurich will not delay a parcel van much, but I should mention the window "
    "and offer the tracking link rather than promise an exact hour."
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city today.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
ORDER = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        "strict": True,
    },
}
ASKED = {"role": "user", "content": "Where is my order 4411, and will it rain in Zürich?"}
CALLED = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": "4411"})},
        },
        {
            "id": "call_2",
            "type": "function",
            "function": {
                "name": "get_weather",
                "arguments": json.dumps({"city": "Zürich", "unit": "c", "note": THOUGHT}),
            },
        },
    ],
}
RESULTS = [
    {"role": "tool", "tool_call_id": "call_1", "content": "Shipped; arrives Friday."},
    {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": [{"type": "text", "text": "Rain"}, {"type": "text", "text": "12 degrees"}],
    },
]
LONG = "The parcel left the depot at nine and reaches the customer by noon. " * 12


def chat(**body) -> tuple[str, dict]:
    return "/v1/chat/completions", body


CHAT = [
    chat(messages=[{"role": "user", "content": "Where is my order?"}]),
    chat(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": LONG}]),
    chat(
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "Two parts:"}, {"type": "text", "text": LONG}],
            }
        ]
    ),
    # The engine runs no tool parser: it is asked to call none, and renders the tools.
    chat(messages=[ASKED], tools=[WEATHER, ORDER], tool_choice="none"),
    chat(messages=[ASKED, CALLED, *RESULTS], tools=[WEATHER, ORDER], tool_choice="none"),
    chat(messages=[ASKED, CALLED, *RESULTS, {"role": "user", "content": "Thanks!"}]),
    chat(messages=[{"role": "user", "name": "customer_support_agent_7", "content": "Hi"}]),
    chat(
        messages=[
            ASKED,
            {"role": "assistant", "content": "Let me see.", "reasoning": THOUGHT},
            {"role": "user", "content": "And?"},
        ]
    ),
    # The older name of `reasoning`.
    chat(
        messages=[
            ASKED,
            {"role": "assistant", "content": "Hm.", "reasoning_content": THOUGHT},
            {"role": "user", "content": "So?"},
        ]
    ),
    chat(
        messages=[ASKED],
        documents=[{"title": "Returns", "text": LONG}, {"title": "Shipping", "text": "Fast."}],
    ),
    chat(
        messages=[ASKED],
        chat_template_kwargs={"enable_thinking": False, "persona": "a patient agent"},
    ),
    chat(
        messages=[ASKED, {"role": "assistant", "content": "Your order 4411 is"}],
        add_generation_prompt=False,
        continue_final_message=True,
    ),
    chat(messages=[ASKED, {"role": "developer", "content": "Answer in French."}]),
    chat(
        messages=[
            ASKED,
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": "not json"},
                    }
                ],
            },
        ]
    ),
    chat(messages=[{"role": "user", "content": "请帮我退回重复扣的那一笔款项，谢谢。" * 5}]),  # noqa: RUF001
]

COMPLETIONS = [
    ("/v1/completions", {"prompt": LONG}),
    ("/v1/completions", {"prompt": ["Where is my order?", "Pay with a card."]}),
    ("/v1/completions", {"prompt": [5, 6, 7, 8, 9, 10, 11]}),
]

RESPONSES = [
    ("/v1/responses", {"input": "Where is my order?", "instructions": "Be brief."}),
    (
        "/v1/responses",
        {
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": LONG}],
                }
            ]
        },
    ),
    (
        "/v1/responses",
        {
            "input": [
                {"role": "user", "content": "Where is order 4411?"},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "lookup_order",
                    "arguments": json.dumps({"order_id": "4411"}),
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "Shipped."},
            ],
            "tools": [
                {
                    "type": "function",
                    "name": "lookup_order",
                    "description": "An order's state.",
                    "parameters": {"type": "object", "properties": {}},
                    "strict": True,
                }
            ],
        },
    ),
    (
        "/v1/responses",
        {
            "input": [
                {"role": "user", "content": "Why?"},
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [],
                    "content": [{"type": "reasoning_text", "text": THOUGHT}],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "Because.", "annotations": []}],
                },
                {"role": "user", "content": "Go on."},
            ]
        },
    ),
]


def messages(**body) -> tuple[str, dict]:
    return "/v1/messages", {"max_tokens": 1, **body}


MESSAGES = [
    messages(messages=[{"role": "user", "content": "Where is my order?"}]),
    messages(
        system=[{"type": "text", "text": "Be brief. "}, {"type": "text", "text": LONG}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
    ),
    messages(
        tool_choice={"type": "none"},
        tools=[
            {
                "name": "lookup_order",
                "description": "An order's state.",
                "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}},
            }
        ],
        messages=[
            {"role": "user", "content": "Where is order 4411?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "lookup_order",
                        "input": {"id": "4411"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": THOUGHT},
                    {"type": "text", "text": "And now?"},
                ],
            },
        ],
    ),
    messages(
        messages=[
            {"role": "user", "content": "Why?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": THOUGHT, "signature": "s"},
                    {"type": "text", "text": "Because."},
                ],
            },
            {"role": "user", "content": "Go on."},
        ]
    ),
]

ALL = CHAT + COMPLETIONS + RESPONSES + MESSAGES
