"""The budget calls' shared connection on uvloop (serve --event-loop uvloop), against a
real redis-server: uvloop's transports are not asyncio's classes."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from sidecar.redis_multiplexed import MultiplexedRedis

pytestmark = [pytest.mark.integration]


def test_it_runs_on_uvloop_too(redis_url):
    async def round_trips() -> list[bytes]:
        client = MultiplexedRedis(redis_url)
        try:
            return await asyncio.gather(*(client.execute("ECHO", str(i)) for i in range(20)))
        finally:
            await client.aclose()

    assert uvloop.run(round_trips()) == [str(i).encode() for i in range(20)]
