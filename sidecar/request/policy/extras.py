"""A request's fields beyond a prompt of text, against its pool's configuration
(config/extras.py): each refused with a 400 naming it unless the pool allows it, or
taken. Pure.

Taken, what each costs: prompt embeddings are counted by their rows and a request's
chat template as it renders, with the prompt (bodies/openai.py, request/counting);
`vllm_xargs`, the transfer parameters and a grammar past the pool's size are charged
here by their size, as prompt text of that many bytes (they steer the engine, and their
size is what a client can grow)."""

from __future__ import annotations

from sidecar.config.extras import Extra, ExtrasConfig
from sidecar.refusals import Reason, Refusal
from sidecar.request.bodies.parsed import ExtraField
from sidecar.request.bodies.tokens import ASCII_CHARS_PER_TOKEN

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
