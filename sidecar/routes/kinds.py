"""What a route is, for admission: the kinds of body the gateway knows how to charge."""

from __future__ import annotations

import enum


class Api(enum.StrEnum):
    """Whose shapes a route's answers take (errors, and fallbacks where there are any)."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    COHERE = "cohere"
    TGI = "tgi"  # the generate routes of TGI, SGLang and vLLM: {"error": ..., "error_type": ...}


class RouteKind(enum.StrEnum):
    api: Api  # whose shapes its answers take: set once, below, a field rather than a lookup

    CHAT = "chat"  # OpenAI chat completions
    COMPLETIONS = "completions"  # OpenAI (text) completions
    CHAT_BATCH = "chat_batch"  # vLLM: many conversations in one request
    RESPONSES = "responses"  # the OpenAI Responses API
    MESSAGES = "messages"  # Anthropic Messages
    INVOCATIONS = "invocations"  # SageMaker's route: the body says chat, completion or pooling
    COHERE_CHAT = "cohere_chat"  # Cohere's v2 chat
    INPUT_ONLY = "input_only"  # embeddings, pooling, classify, score, rerank: no output
    AUDIO = "audio"  # transcription and translation: a multipart upload
    GENERATE = "generate"  # vLLM's tokens-in generate, SGLang's and TGI's /generate
    PASS = "pass"  # no GPU work: identified and tagged, sent on uncharged
    REFUSE = "refuse"  # not served through the gateway: a 404

    @property
    def charged(self) -> bool:
        return self not in (RouteKind.PASS, RouteKind.REFUSE)

    @property
    def generates(self) -> bool:
        """Its answer is generated text, whose length a client asks for."""
        return self not in (RouteKind.INPUT_ONLY, RouteKind.PASS, RouteKind.REFUSE)


_API = {
    RouteKind.MESSAGES: Api.ANTHROPIC,
    RouteKind.COHERE_CHAT: Api.COHERE,
    RouteKind.GENERATE: Api.TGI,
}
for _kind in RouteKind:
    _kind.api = _API.get(_kind, Api.OPENAI)
