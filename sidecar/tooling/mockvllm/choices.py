"""A request answered several times (`n`, or `best_of`): one engine sequence a choice, as
vLLM runs them, the choices indexed in order; streamed, their chunks interleave as the
sequences produce them. The usage counts every choice's tokens, the prompt once."""

from __future__ import annotations

import asyncio

from aiohttp import web

from sidecar.request.bodies.parsed import ParsedRequest
from sidecar.tooling.mockvllm.engine import Sequence
from sidecar.tooling.mockvllm.openai_shapes import SSE_DONE, ResponseShaper, usage
from sidecar.tooling.mockvllm.streaming import pieces


async def answer(
    request: web.Request,
    sequences: list[Sequence],
    shaper: ResponseShaper,
    parsed: ParsedRequest,
    seen: dict[str, str],
    interval: int = 1,
) -> web.StreamResponse:
    if parsed.stream:
        return await _stream(request, sequences, shaper, parsed.usage_in_stream, seen, interval)
    texts = await asyncio.gather(*(_text(sequence) for sequence in sequences))
    answers = [(text, s.finish_reason or "stop") for text, s in zip(texts, sequences, strict=True)]
    body = shaper.complete_many(answers, _usage(sequences))
    return web.json_response(body, headers=seen)


async def _text(sequence: Sequence) -> str:
    pieces = []
    while (token := await sequence.output.get()) is not None:
        pieces.append(token)
    return "".join(pieces)


def _usage(sequences: list[Sequence]) -> dict[str, int]:
    return usage(sequences[0].prompt_tokens, sum(s.generated for s in sequences))


async def _stream(
    request: web.Request,
    sequences: list[Sequence],
    shaper: ResponseShaper,
    include_usage: bool,
    seen: dict[str, str],
    interval: int,
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **seen}
    )
    await response.prepare(request)
    tokens: asyncio.Queue[tuple[int, str | None, str | None, int]] = asyncio.Queue()

    async def pump(index: int, sequence: Sequence) -> None:
        async for text, finish, generated in pieces(sequence, interval):
            await tokens.put((index, text, finish, generated))
        await tokens.put((index, None, None, 0))

    pumps = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(sequences)]
    try:
        opened: set[int] = set()
        ended = 0
        while ended < len(sequences):
            index, text, finish, generated = await tokens.get()
            if text is None:
                ended += 1
                continue
            if index not in opened and shaper.first_bytes():  # a chat choice's opening
                await response.write(shaper.chunk(None, first=True, index=index))
            opened.add(index)
            await response.write(shaper.chunk(text, finish, index=index, generated=generated))
        if include_usage:
            await response.write(shaper.usage_chunk(_usage(sequences)))
        await response.write(SSE_DONE)
        await response.write_eof()
    finally:
        for each in pumps:
            each.cancel()
    return response
