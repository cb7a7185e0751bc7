"""The path a model server routes a request on, whatever way the client spelled it.

vLLM and SGLang serve with uvicorn and Starlette, which route on the path
percent-decoded once (`%63` is `c`, `%2F` is `/`); TGI's axum routes on the path as
sent. Envoy, configured as shipped (normalize_path, merge_slashes, escaped slashes
rejected), resolves dot segments and decodes what needs no encoding before the sidecar
sees the path. The sidecar decides on one canonical form that covers every spelling a
server could route to the same handler: the query and fragment dropped, decoded once,
dot segments resolved, empty segments and a trailing slash dropped. A spelling no
server routes (`/v1/./chat`) is then charged like the route it resembles, never
passed on as unknown.
"""

from __future__ import annotations

from urllib.parse import unquote


def canonical_path(raw: str) -> str:
    """`/v1//chat/./completions/?x=1` -> `/v1/chat/completions`."""
    bare = raw.split("?", 1)[0].split("#", 1)[0]
    decoded = unquote(bare, errors="replace")
    segments: list[str] = []
    for segment in decoded.replace("\\", "/").split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    return "/" + "/".join(segments)
