"""Audio transcription and translation: a multipart upload, forwarded as it came.

Its cost is the audio's length in the model's tokens, which only decoding the file
would tell; the estimate is the upload's size over `media.audio_bytes_per_token`
(speech models take about 50 tokens a second of audio, and speech files run near
16 000 bytes a second), settled from the answer's usage when it has one. `model` and
`stream` are read from their form fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sidecar.request.bodies.limits import MAX_MODEL_CHARS, InvalidRequest
from sidecar.request.bodies.parsed import ParsedRequest, Prompt, ResponseShape
from sidecar.routes.kinds import RouteKind

_FIELD = r'Content-Disposition:\s*form-data;\s*name="{name}"\r?\n(?:[^\r\n]+\r?\n)*\r?\n([^\r\n]*)'
_MODEL = re.compile(_FIELD.format(name="model").encode(), re.IGNORECASE)
_STREAM = re.compile(_FIELD.format(name="stream").encode(), re.IGNORECASE)


def read_audio(raw: bytes, headers: Mapping[str, str]) -> ParsedRequest:
    if not headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise InvalidRequest("An audio request is a multipart/form-data upload.", "file")
    model = _field(_MODEL, raw)
    if model is not None and len(model) > MAX_MODEL_CHARS:
        raise InvalidRequest(f"'model' is longer than {MAX_MODEL_CHARS} characters.", "model")
    stream = (_field(_STREAM, raw) or "").lower() == "true"
    return ParsedRequest(
        RouteKind.AUDIO,
        {},
        ResponseShape(stream=stream, model=model),
        Prompt(audio_bytes=len(raw)),
        None,
        prompt_param="file",
        json_body=False,
        body_priority=False,
    )


def _field(pattern: re.Pattern[bytes], raw: bytes) -> str | None:
    found = pattern.search(raw)
    return found.group(1).decode("utf-8", "replace").strip() if found else None
