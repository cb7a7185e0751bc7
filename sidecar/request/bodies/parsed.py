"""What admission knows of a request once its body is read: one value for every API."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from sidecar.config.extras import Extra
from sidecar.config.template import TemplateField
from sidecar.routes.kinds import Api, RouteKind

FieldPath = tuple[str, ...]  # ("parameters", "max_new_tokens")


class TextForm(enum.StrEnum):
    """The answer a shed request can be given in its API's shape, with the fallback text."""

    CHAT = "chat"  # chat.completion, or its chunks
    COMPLETION = "completion"  # text_completion
    RESPONSE = "response"  # a Responses API object, or its events
    MESSAGE = "message"  # an Anthropic message, or its events


class Media(enum.StrEnum):
    IMAGE = "image"
    IMAGE_LOW_DETAIL = "image_low_detail"
    AUDIO = "audio"
    VIDEO = "video"
    FILE = "file"


@dataclass(frozen=True)
class Prompt:
    """The prompt as the GPU will prefill it: texts to count, tokens already counted
    (token ids, chat-template overhead), media parts, and context the server adds
    (a Responses API conversation continued by previous_response_id)."""

    texts: tuple[str, ...] = ()
    fixed_tokens: int = 0  # token ids, counted already
    media: tuple[Media, ...] = ()
    stored_context: bool = False
    audio_bytes: int = 0  # an uploaded audio file's size
    # Texts of fields some chat templates render and others do not, with their field
    # (config/template.py): counted unless the pool's template leaves the field out.
    template_texts: tuple[tuple[TemplateField, str], ...] = ()
    # The chat template's role markers, estimated (exact counts render the template).
    template_overhead: int = 0

    def rendered_texts(self, unrendered: frozenset[TemplateField]) -> list[str]:
        """Its texts to count: all but those of fields the pool's template leaves out."""
        return [*self.texts, *(t for f, t in self.template_texts if f not in unrendered)]

    # Part of the cost is a configured estimate, to settle from the answer's usage.
    estimated_from_outside: bool = field(init=False)

    def __post_init__(self) -> None:
        outside = bool(self.media or self.stored_context or self.audio_bytes)
        object.__setattr__(self, "estimated_from_outside", outside)


@dataclass(frozen=True)
class OutputLimit:
    """Where the API takes its limit on the answer's length, and what the client asked."""

    fields: tuple[FieldPath, ...]  # the names it is read from, the first set one wins
    requested: int | None  # None: the client set none
    default_field: FieldPath  # where a tier's cap is written when none is set
    # Answers the request asks for: `n` (or `best_of`, which the engine generates and
    # ranks) for each prompt, of each of a batch's conversations.
    per_request: int = 1

    @property
    def param(self) -> str:
        return ".".join(self.default_field)

    def each_within(self, total: int) -> int:
        """The most each answer may take for all of them to stay within `total`."""
        return total // self.per_request


@dataclass(frozen=True)
class ResponseShape:
    """What the client will parse, so the gateway's own answers match it."""

    api: Api = Api.OPENAI
    text: TextForm | None = None  # None: only an error can answer for the GPU
    stream: bool = False
    include_usage: bool = False
    model: str | None = None
    choices: int = 1


@dataclass(frozen=True)
class StreamUsage:
    """The usage an OpenAI stream carries, as its `stream_options` ask: a closing chunk
    of the whole answer's, and with it a running count in every chunk (vLLM gives the
    running count only with the closing one)."""

    final: bool = False
    continuous: bool = False

    @classmethod
    def asked(cls, options: object) -> StreamUsage:
        if not isinstance(options, dict) or options.get("include_usage") is not True:
            return cls()
        return cls(final=True, continuous=options.get("continuous_usage_stats") is True)


@dataclass(frozen=True)
class ExtraField:
    """A field beyond a prompt of text (config/extras.py), as the body carries it."""

    extra: Extra
    param: str  # where: "vllm_xargs", "chat_template_kwargs.chat_template"
    size: int  # bytes of its JSON: what a grammar is judged and an extra charged by


@dataclass(frozen=True)
class ParsedRequest:
    kind: RouteKind
    body: dict[str, Any]
    shape: ResponseShape
    prompt: Prompt
    output: OutputLimit | None  # None: the route generates no text (embeddings...)
    # The answer's usage can be read as it passes (a stream that ends with its usage).
    usage_in_stream: bool = False
    # An OpenAI stream (chat, completions): the usage its client asked for, which the
    # gateway may ask more of and take back out (None: another API, or not a stream).
    stream_usage: StreamUsage | None = None
    prompt_param: str = "messages"  # the field a too-long prompt is blamed on
    json_body: bool = True  # else the body is forwarded as it came (a multipart upload)
    body_priority: bool = True  # the API's body takes vLLM's `priority`
    # Fields beyond a prompt of text, each refused unless the pool allows it.
    extras: tuple[ExtraField, ...] = ()

    # Its shape's, read on every decision: plain fields, set once.
    model: str | None = field(init=False)
    stream: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", self.shape.model)
        object.__setattr__(self, "stream", self.shape.stream)
