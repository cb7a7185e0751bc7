"""Bodies read whole: embeddings, pooling, classify, score, rerank (input only, in many
layouts: `input`, `query` and `documents`, `text_1` and `text_2`, `messages`, token ids)
and Cohere's chat. Every string the body holds is counted as prompt text and every
integer in an array as a token id, but for fields that are plainly settings; a media
part counts as media. Counting what is not prompt over-charges a little; missing what
is would let a new field in.
"""

from __future__ import annotations

from typing import Any

from sidecar.request.bodies.limits import InvalidRequest, model_of, positive_int
from sidecar.request.bodies.parsed import OutputLimit, ParsedRequest, Prompt, ResponseShape
from sidecar.request.bodies.parts import MEDIA_PARTS, Collected, low_detail
from sidecar.routes.kinds import Api, RouteKind

# Top-level fields that say how to answer, not what to read.
SETTINGS = frozenset(
    {
        "model", "encoding_format", "user", "request_id", "priority", "dimensions",
        "truncate_prompt_tokens", "normalize", "embed_dtype", "embedding_types",
        "input_type", "task", "top_n", "return_documents", "use_activation", "softmax",
        "activation", "max_tokens", "stream", "temperature", "p", "k", "seed",
        "stop_sequences", "frequency_penalty", "presence_penalty", "safety_mode",
        "response_format", "logprobs", "kv_transfer_params", "mm_processor_kwargs",
        "chat_template", "chat_template_kwargs", "add_special_tokens", "cache_salt",
    }
)  # fmt: skip
# Walking a body costs a step a value: a body of more values than this is refused.
MAX_VALUES = 2_000_000


def read_input_only(body: dict[str, Any], api: Api = Api.OPENAI) -> ParsedRequest:
    collected, token_ids = _walk(body)
    if not collected.texts and not token_ids and not collected.media:
        raise InvalidRequest("The request has no input.", "input")
    return ParsedRequest(
        RouteKind.INPUT_ONLY,
        body,
        ResponseShape(api, model=model_of(body)),
        Prompt(tuple(collected.texts), token_ids, tuple(collected.media)),
        None,
        prompt_param="input",
    )


def read_cohere_chat(body: dict[str, Any]) -> ParsedRequest:
    collected, token_ids = _walk(body)
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        raise InvalidRequest("'messages' must be a non-empty array.", "messages")
    stream = body.get("stream") is True
    field = ("max_tokens",)
    return ParsedRequest(
        RouteKind.COHERE_CHAT,
        body,
        ResponseShape(Api.COHERE, stream=stream, model=model_of(body)),
        Prompt(tuple(collected.texts), token_ids, tuple(collected.media)),
        OutputLimit((field,), positive_int(body, "max_tokens"), field),
    )


def _walk(body: dict[str, Any]) -> tuple[Collected, int]:
    collected = Collected()
    token_ids = 0
    pending: list[Any] = [value for key, value in body.items() if key not in SETTINGS]
    seen = 0
    while pending:
        value = pending.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise InvalidRequest(f"The request body holds more than {MAX_VALUES} values.")
        if isinstance(value, str):
            collected.texts.append(value)
        elif isinstance(value, list):
            ints = sum(1 for item in value if isinstance(item, int))
            token_ids += ints
            seen += ints
            pending.extend(item for item in value if not isinstance(item, int))
        elif isinstance(value, dict):
            kind = value.get("type")
            media = MEDIA_PARTS.get(kind) if isinstance(kind, str) else None
            if media is not None:
                collected.media.append(low_detail(value, media))
            else:
                pending.extend(value.values())
    return collected, token_ids
