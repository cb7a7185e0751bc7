"""The fields of a body beyond a prompt of text (config/extras.py), found once, for the
pool's configuration to allow or refuse: vLLM's `prompt_embeds`, a request's own chat
template (`chat_template`, or `chat_template_kwargs.chat_template`), `vllm_xargs`,
`kv_transfer_params` and `ec_transfer_params`, and the structured outputs of every API
(`structured_outputs`, `response_format`, the Responses API's `text.format`, Anthropic's
`output_config.format`, the generate routes' `sampling_params` and `parameters`
grammars), each with its size."""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.config.extras import Extra
from sidecar.request.bodies.parsed import ExtraField

_TOP_LEVEL = {
    "prompt_embeds": Extra.PROMPT_EMBEDS,
    "chat_template": Extra.CHAT_TEMPLATE,
    "vllm_xargs": Extra.VLLM_XARGS,
    "kv_transfer_params": Extra.TRANSFER_PARAMS,
    "ec_transfer_params": Extra.TRANSFER_PARAMS,
}
# Structured outputs: top-level fields, and the fields of an object that hold them.
_GRAMMARS = ("structured_outputs", "response_format")
_GRAMMARS_WITHIN = {
    "text": ("format",),  # Responses
    "output_config": ("format",),  # Anthropic Messages
    # vLLM's, SGLang's and TGI's generate routes.
    "sampling_params": ("structured_outputs", "json_schema", "regex", "ebnf"),
    "parameters": ("grammar",),
}
_KEYS = frozenset({*_TOP_LEVEL, *_GRAMMARS, *_GRAMMARS_WITHIN, "chat_template_kwargs"})


def read_extras(body: dict[str, Any]) -> tuple[ExtraField, ...]:
    if _KEYS.isdisjoint(body):  # the usual request
        return ()
    found = []
    for key, extra in _TOP_LEVEL.items():
        if _given(body.get(key)):
            found.append(ExtraField(extra, key, _size(body[key])))
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and _given(kwargs.get("chat_template")):
        param, size = "chat_template_kwargs.chat_template", _size(kwargs["chat_template"])
        found.append(ExtraField(Extra.CHAT_TEMPLATE, param, size))
    for key in _GRAMMARS:
        if _given(body.get(key)):
            found.append(ExtraField(Extra.LARGE_GRAMMARS, key, _size(body[key])))
    for key, inner in _GRAMMARS_WITHIN.items():
        holder = body.get(key)
        if isinstance(holder, dict):
            for name in inner:
                if _given(holder.get(name)):
                    param = f"{key}.{name}"
                    found.append(ExtraField(Extra.LARGE_GRAMMARS, param, _size(holder[name])))
    return tuple(found)


def _given(value: Any) -> bool:
    """Set to something: null, and an empty list or object, ask for nothing."""
    return value is not None and value != [] and value != {}


def _size(value: Any) -> int:
    return len(msgspec.json.encode(value))
