"""The generate routes, each server's own body:
- vLLM's tokens-in `/inference/v1/generate`: `token_ids` (and media in `content_parts`),
  `sampling_params.max_tokens`;
- SGLang's `/generate`: `text` or `input_ids`, `sampling_params.max_new_tokens`;
- TGI's `/generate` and `/generate_stream`: `inputs`, `parameters.max_new_tokens`.
"""

from __future__ import annotations

from typing import Any

from sidecar.request.bodies.limits import (
    MAX_TOKEN_IDS,
    InvalidRequest,
    bounded_list,
    model_of,
    positive_int,
)
from sidecar.request.bodies.parsed import (
    FieldPath,
    OutputLimit,
    ParsedRequest,
    Prompt,
    ResponseShape,
)
from sidecar.request.bodies.parts import Collected
from sidecar.request.bodies.tokens import token_id_prompts
from sidecar.routes.kinds import Api, RouteKind


def read_generate(body: dict[str, Any], streams: bool = False) -> ParsedRequest:
    """`streams`: the route always streams (TGI's /generate_stream)."""
    collected = Collected()
    texts = collected.texts
    token_ids = 0
    if "token_ids" in body:  # vLLM
        token_ids = _token_ids(body["token_ids"], "token_ids")
        # Media the server fetches and encodes beside the ids: priced as media parts.
        for index, part in enumerate(bounded_list(body.get("content_parts"), "content_parts")):
            collected.part(part, f"content_parts[{index}]")
        field: FieldPath = ("sampling_params", "max_tokens")
    elif "inputs" in body:  # TGI
        if not isinstance(body["inputs"], str):
            raise InvalidRequest("'inputs' must be a string.", "inputs")
        texts.append(body["inputs"])
        field = ("parameters", "max_new_tokens")
    elif "text" in body or "input_ids" in body:  # SGLang
        text = body.get("text")
        if isinstance(text, str):
            texts.append(text)
        elif text is not None:
            items = bounded_list(text, "text")
            if not all(isinstance(item, str) for item in items):
                raise InvalidRequest("'text' must be a string or an array of strings.", "text")
            texts.extend(items)
        if body.get("input_ids") is not None:
            token_ids = _token_ids(body["input_ids"], "input_ids")
        field = ("sampling_params", "max_new_tokens")
    else:
        raise InvalidRequest("The request has no prompt ('inputs', 'text' or 'token_ids').")
    parent, name = field
    params = body.get(parent)
    if params is not None and not isinstance(params, dict):
        raise InvalidRequest(f"'{parent}' must be an object.", parent)
    requested = positive_int(params or {}, name, f"{parent}.{name}")
    stream = streams or body.get("stream") is True
    return ParsedRequest(
        RouteKind.GENERATE,
        body,
        ResponseShape(Api.TGI, stream=stream, model=model_of(body)),
        Prompt(tuple(texts), token_ids, tuple(collected.media)),
        OutputLimit((field,), requested, field),
        prompt_param=next(k for k in ("token_ids", "inputs", "text", "input_ids") if k in body),
        body_priority=False,
    )


def _token_ids(value: Any, name: str) -> int:
    ids = bounded_list(value, name, required=True, most=MAX_TOKEN_IDS)
    count = token_id_prompts(ids)
    if not ids or (count == 0 and ids):
        raise InvalidRequest(f"'{name}' must be a non-empty array of token ids.", name)
    return count
