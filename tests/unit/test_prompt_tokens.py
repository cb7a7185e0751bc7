from __future__ import annotations

from sidecar.request.bodies.tokens import estimate_text_tokens
from sidecar.tooling.benchmarks.prompt_estimate import estimate_prompt_tokens


def test_estimate_counts_text_parts_messages_and_token_ids():
    chat = {
        "messages": [
            {"role": "system", "content": "x" * 40},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "y" * 8},
                    {"type": "image_url", "image_url": {"url": "u"}},
                ],
            },
        ]
    }
    assert estimate_prompt_tokens(chat) == 10 + 2 + 2 * 4
    assert estimate_prompt_tokens({"prompt": ["abcd", "abcdefgh"]}) == 3
    assert estimate_prompt_tokens({"prompt": [1, 2, 3]}) == 3
    assert estimate_prompt_tokens({"prompt": [[1, 2], [3]]}) == 3


def test_cjk_text_is_counted_near_a_token_a_character():
    chinese = "请帮我退回重复扣的那一笔款项谢谢"  # 16 characters
    assert estimate_text_tokens(chinese) == 13  # 16 characters at 0.8, rounded up
    assert estimate_text_tokens("abcd" * 10 + chinese) == 10 + 13


def test_tool_schemas_count_towards_the_prompt():
    tools = [{"type": "function", "function": {"name": "lookup_order", "parameters": {}}}]
    without = estimate_prompt_tokens({"messages": [{"role": "user", "content": "hi"}]})
    with_tools = estimate_prompt_tokens(
        {"messages": [{"role": "user", "content": "hi"}], "tools": tools}
    )
    assert with_tools - without >= 15
