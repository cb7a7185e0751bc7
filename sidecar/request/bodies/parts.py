"""Content parts, as the APIs spell them: what is text to count and what is media.

OpenAI chat (`text`, `image_url`, `input_audio`, `file`; vLLM's `video_url`,
`audio_url`), the Responses API (`input_text`, `output_text`, `input_image`,
`input_file`, `input_audio`) and Anthropic Messages (`text`, `image`, `document`,
`tool_use`, `tool_result`, `thinking`) all put a list of typed parts where a message's
content may be a plain string.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sidecar.config.template import TemplateField
from sidecar.request.bodies.limits import InvalidRequest, bounded_list
from sidecar.request.bodies.parsed import Media

MEDIA_PARTS = {
    "image_url": Media.IMAGE,
    "input_image": Media.IMAGE,
    "image": Media.IMAGE,
    "image_embeds": Media.IMAGE,
    "input_audio": Media.AUDIO,
    "audio_url": Media.AUDIO,
    "video_url": Media.VIDEO,
    "file": Media.FILE,
    "input_file": Media.FILE,
    "document": Media.FILE,
}
# Keys of a part whose string value is text the model reads.
_TEXT_KEYS = ("text", "refusal", "thinking")


class Collected:
    """Texts and media gathered from a body, in the order they come."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.media: list[Media] = []
        # Texts of fields not every chat template renders (config/template.py).
        self.template_texts: list[tuple[TemplateField, str]] = []

    def template_fields(self, source: dict[str, Any], fields: Mapping[str, TemplateField]) -> None:
        """The string values of these keys of `source`, each its field's text (one call
        for a message's several fields)."""
        for key, field in fields.items():
            value = source.get(key)
            if isinstance(value, str):
                self.template_texts.append((field, value))

    def content(self, content: Any, where: str) -> None:
        """A message's content: a string, or a list of parts."""
        if content is None:
            return
        if isinstance(content, str):
            self.texts.append(content)
            return
        for index, part in enumerate(bounded_list(content, where)):
            self.part(part, f"{where}[{index}]")

    def part(self, part: Any, where: str) -> None:
        if isinstance(part, str):  # some APIs take bare strings among parts
            self.texts.append(part)
            return
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise InvalidRequest(f"'{where}' must be an object with a 'type'.", where)
        kind = part["type"]
        media = MEDIA_PARTS.get(kind)
        if media is not None:
            self.media.append(low_detail(part, media))
            return
        for key in _TEXT_KEYS:
            value = part.get(key)
            if isinstance(value, str):
                self.texts.append(value)
        if kind == "tool_use" and part.get("input") is not None:
            self.texts.append(compact_json(part["input"]))
        if kind == "tool_result":
            self.content(part.get("content"), f"{where}.content")

    def json(self, value: Any) -> None:
        """A JSON value the template renders into the prompt (tool schemas)."""
        if value:
            self.texts.append(compact_json(value))

    def text_or_json(self, value: Any) -> None:
        """A string as it is, any other JSON value as JSON (tool-call arguments are a
        JSON string in OpenAI's API, an object in some clients')."""
        if isinstance(value, str):
            self.texts.append(value)
        else:
            self.json(value)

    def strings(self, field: TemplateField, value: Any) -> None:
        """Every string inside a JSON value (a template's own arguments: what of them it
        renders is text; flags and numbers are not)."""
        if isinstance(value, str):
            self.template_texts.append((field, value))
        elif isinstance(value, dict):
            for inner in value.values():
                self.strings(field, inner)
        elif isinstance(value, list):
            for inner in value:
                self.strings(field, inner)


def compact_json(value: Any) -> str:
    """A JSON value as a template writes it, less its spaces: non-ASCII text as itself
    (an escape is six characters where the template writes one)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def low_detail(part: dict[str, Any], media: Media) -> Media:
    if media is not Media.IMAGE:
        return media
    inner = part.get("image_url")
    detail = inner.get("detail") if isinstance(inner, dict) else part.get("detail")
    return Media.IMAGE_LOW_DETAIL if detail == "low" else media
