"""The parts of an OpenAI-compatible request body that admission needs."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any


class Endpoint(enum.Enum):
    CHAT = "/v1/chat/completions"
    COMPLETIONS = "/v1/completions"
    OTHER = ""

    @classmethod
    def for_path(cls, path: str) -> Endpoint:
        bare = path.split("?", 1)[0].rstrip("/")
        for endpoint in (cls.CHAT, cls.COMPLETIONS):
            if bare == endpoint.value:
                return endpoint
        return cls.OTHER


class InvalidRequest(ValueError):
    """A request body the API cannot take; maps to an OpenAI 400 error."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class CompletionRequest:
    endpoint: Endpoint
    body: dict[str, Any]

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def include_usage(self) -> bool:
        options = self.body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    @property
    def max_tokens(self) -> int | None:
        # max_completion_tokens is the chat API's newer name for the same limit.
        for key in ("max_completion_tokens", "max_tokens"):
            value = self.body.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None


def parse_completion_request(endpoint: Endpoint, raw: bytes) -> CompletionRequest:
    try:
        body = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidRequest("The request body is not valid UTF-8.") from None
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc.msg}.") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    return CompletionRequest(endpoint, body)
