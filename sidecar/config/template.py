"""What a pool's model's chat template renders into the prompt, where templates differ.

Every field of a chat request that some chat templates render is counted by default
(bodies/openai.py); a pool whose model's template leaves a field out says so here, and
the field is not charged there. Content and tool calls are rendered by every template
that takes them, and always count."""

from __future__ import annotations

import enum

from sidecar.config.base import Strict


class TemplateField(enum.StrEnum):
    NAME = "name"  # a message's name
    REASONING = "reasoning"  # a message's reasoning_content or reasoning
    TOOL_CALL_ID = "tool_call_id"  # a tool result's call id
    DOCUMENTS = "documents"  # the request's documents (retrieval templates)
    CHAT_TEMPLATE_KWARGS = "chat_template_kwargs"  # the strings among them


class TemplateConfig(Strict):
    # The fields this model's chat template does not render: not charged.
    unrendered: frozenset[TemplateField] = frozenset()
