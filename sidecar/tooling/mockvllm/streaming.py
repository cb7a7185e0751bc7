"""A sequence's tokens as its stream sends them: vLLM's `stream_interval` (the request's,
or the server's `--stream-interval` if larger) sends the first token alone, then every
that many tokens, and what is left when the sequence ends."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sidecar.tooling.mockvllm.engine import Sequence


async def pieces(sequence: Sequence, interval: int) -> AsyncIterator[tuple[str, str | None, int]]:
    """(text, finish reason on the last piece, tokens generated so far), a piece a chunk."""
    batch: list[str] = []
    sent = 0
    while (token := await sequence.output.get()) is not None:
        batch.append(token)
        # The engine queues a sequence's last token and its end marker together, so the
        # last token is known when only the marker is left behind it.
        last = sequence.finished and sequence.output.qsize() == 1
        if last or sent == 0 or len(batch) >= interval:
            sent += len(batch)
            yield "".join(batch), (sequence.finish_reason if last else None), sent
            batch = []
