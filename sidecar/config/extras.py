"""Request fields that make the engine render or run more than a prompt of text, and
that a pool takes only when its platform says so.

vLLM accepts them only with engine flags (`--enable-prompt-embeds`,
`--trust-request-chat-template`) or deployments (disaggregated prefill, custom
extensions) that a platform turns on for some models, not all. The gateway refuses each
with a 400 naming the field unless the pool's configuration allows it; allowed, each is
charged (docs/cost.md: prompt embeddings by their rows, a request's own chat template as
it renders, the others by their size)."""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import Field

from sidecar.config.base import Strict


class Extra(enum.StrEnum):
    PROMPT_EMBEDS = "prompt_embeds"  # completions' prompt_embeds: tensors as prompts
    CHAT_TEMPLATE = "chat_template"  # a request's own chat template (or in its kwargs)
    VLLM_XARGS = "vllm_xargs"  # arguments for the engine's custom extensions
    # kv_transfer_params, ec_transfer_params: disaggregated serving's hand-over.
    TRANSFER_PARAMS = "transfer_params"
    # Structured-output schemas and grammars longer than grammar_max_bytes.
    LARGE_GRAMMARS = "large_grammars"


class ExtrasConfig(Strict):
    # The extras this pool takes (charged); any other is refused with a 400.
    allowed: frozenset[Extra] = frozenset()
    # A structured output's schema, grammar, regex or choices up to this many bytes of JSON
    # is taken by every pool and not charged: it steers decoding, it is no prompt.
    grammar_max_bytes: Annotated[int, Field(ge=0)] = 16384
