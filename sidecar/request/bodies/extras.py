"""The fields of a body beyond a prompt of text (config/extras.py), found once, for the
pool's configuration to allow or refuse: vLLM's `prompt_embeds`, a request's own chat
template (`chat_template`, or `chat_template_kwargs.chat_template`), `vllm_xargs`,
`kv_transfer_params` and `ec_transfer_params`, and the structured outputs of every API
(`structured_outputs`, `response_format`, the Responses API's `text.format`, Anthropic's
`output_config.format`, the generate routes' `sampling_params` and `parameters`
grammars), each with its size.

Then against its pool's configuration (`extras_tokens`): each refused with a 400 naming
it unless the pool allows it, or taken. Taken, what each costs: prompt embeddings are
counted by their rows and a request's chat template as it renders, with the prompt
(bodies/openai.py, request/counting); `vllm_xargs`, the transfer parameters and a grammar
past the pool's size are charged by their size, as prompt text of that many bytes (they
steer the engine, and their size is what a client can grow)."""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.config.extras import Extra, ExtrasConfig
from sidecar.refusals import Reason, Refusal
from sidecar.request.bodies.parsed import ExtraField
from sidecar.request.bodies.tokens import ASCII_CHARS_PER_TOKEN

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


# Charged with the prompt, by rows or as rendered, not by size.
_COUNTED_WITH_THE_PROMPT = frozenset({Extra.PROMPT_EMBEDS, Extra.CHAT_TEMPLATE})

_WHY = {
    Extra.PROMPT_EMBEDS: "prompt embeddings",
    Extra.CHAT_TEMPLATE: "a chat template of the request's own",
    Extra.VLLM_XARGS: "extension arguments (vllm_xargs)",
    Extra.TRANSFER_PARAMS: "disaggregated-serving transfer parameters",
}


def extras_tokens(extras: tuple[ExtraField, ...], config: ExtrasConfig, model: str | None) -> int:
    """The prompt tokens the extras add to the request's charge; raises a Refusal for
    the first the pool does not take."""
    tokens = 0
    for field in extras:
        extra = field.extra
        if extra is Extra.LARGE_GRAMMARS and field.size <= config.grammar_max_bytes:
            continue  # an ordinary structured output
        if extra not in config.allowed:
            raise Refusal(Reason.INVALID_REQUEST, _refused(field, config, model), param=field.param)
        if extra not in _COUNTED_WITH_THE_PROMPT:
            tokens += -(-field.size // ASCII_CHARS_PER_TOKEN)
    return tokens


def _refused(field: ExtraField, config: ExtrasConfig, model: str | None) -> str:
    where = f"for the model `{model}`" if model else "here"
    if field.extra is Extra.LARGE_GRAMMARS:
        return (
            f"'{field.param}' is {field.size} bytes; this gateway takes structured outputs of "
            f"at most {config.grammar_max_bytes} bytes {where}."
        )
    return f"'{field.param}': this gateway takes no {_WHY[field.extra]} {where}."
