"""Which running streams are ended to free a pool's KV blocks: the lowest tier's newest
first, no more than needed, only that pool's."""

from __future__ import annotations

from sidecar.config.base import Tier
from sidecar.request.eviction.streams import EvictableStreams, RunningStream


async def _never() -> None:
    raise AssertionError("not ended here")


def stream(slot: str, tier: Tier, started: float, blocks: float, pool: str = "a") -> RunningStream:
    return RunningStream(slot, tier, pool, started, blocks, 16, end=_never, flowing=True)


def test_the_lowest_tier_s_newest_streams_go_first_and_no_more_than_needed():
    streams = EvictableStreams()
    for s in (
        stream("p2-old", Tier.P2, 1.0, 10),
        stream("p2-new", Tier.P2, 5.0, 10),
        stream("p1-new", Tier.P1, 9.0, 10),
        stream("p2-elsewhere", Tier.P2, 9.0, 10, pool="b"),
    ):
        streams.add(s)
    assert [s.slot for s in streams.choose("a", 5)] == ["p2-new"]
    assert [s.slot for s in streams.choose("a", 15)] == ["p2-new", "p2-old"]
    assert [s.slot for s in streams.choose("a", 25)] == ["p2-new", "p2-old", "p1-new"]
    assert streams.choose("a", 0) == []
    assert streams.blocks_in("a") == 30


def test_a_stream_holds_its_prompt_and_what_it_streamed():
    running = stream("s", Tier.P2, 1.0, 4)
    running.tokens = 40
    assert running.blocks == 4 + 40 / 16
    streams = EvictableStreams()
    streams.add(running)
    streams.remove("s")
    assert len(streams) == 0 and streams.choose("a", 1) == []


def test_a_stream_whose_body_has_not_begun_is_not_chosen():
    streams = EvictableStreams()
    starting = stream("starting", Tier.P2, 9.0, 10)
    starting.flowing = False
    streams.add(starting)
    streams.add(stream("flowing", Tier.P2, 1.0, 10))
    assert [s.slot for s in streams.choose("a", 50)] == ["flowing"]
