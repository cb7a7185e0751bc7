"""Exchange ends passed between two workers over real Unix sockets."""

from __future__ import annotations

import pytest
from envoy.data.accesslog.v3 import accesslog_pb2

from sidecar.request.completion.access_log import ExchangeEnd
from sidecar.workers.siblings import Siblings
from sidecar.workers.worker import Worker
from tests.integration.helpers import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


def end(slot: str) -> ExchangeEnd:
    flags = accesslog_pb2.ResponseFlags(downstream_remote_reset=True)
    return ExchangeEnd(slot, "p1", 200, flags, 0.1, 0.5, prompt_tokens=7, completion_tokens=9)


async def test_an_end_goes_to_the_worker_whose_slot_it_names(tmp_path):
    got: list[ExchangeEnd] = []
    first = Siblings(Worker(0, 2, "abc", tmp_path), got.append)
    second = Siblings(Worker(1, 2, "abc", tmp_path), lambda _end: None)
    await first.start()
    await second.start()
    try:
        assert not second.forward(end("abcw1-1-9f0e"))  # its own: nothing to pass on
        assert not second.forward(end("fffw0-1-9f0e"))  # another gateway's
        sent = [end(f"abcw0-{n}-{n:04x}") for n in range(50)]
        assert all(second.forward(e) for e in sent)
        await wait_until(lambda: len(got) == len(sent), what="every end passed on")
        assert got == sent  # whole, in order, flags and usage included
        assert got[0].response_flags.downstream_remote_reset
        assert (second.forwarded, first.received) == (50, 50)
    finally:
        await second.stop()
        await first.stop()
