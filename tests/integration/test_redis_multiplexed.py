"""The budget calls' shared connection against a real redis-server: replies in order,
redis-py's errors, scripts reloaded, a lost or stuck server survived."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from sidecar.redis_multiplexed import MultiplexedRedis
from sidecar.tooling.stack import readiness
from sidecar.tooling.stack.redis_servers import redis_on_free_port

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_commands_sent_at_once_get_their_own_replies(redis_url):
    client = MultiplexedRedis(redis_url)
    try:
        keys = [f"k{i}" for i in range(200)]
        await asyncio.gather(*(client.execute("SET", key, i) for i, key in enumerate(keys)))
        values = await asyncio.gather(*(client.execute("GET", key) for key in keys))
        assert values == [str(i).encode() for i in range(200)]
        with pytest.raises(aioredis.ResponseError, match="WRONGTYPE"):
            await client.execute("LPUSH", "k1", "x")
        assert await client.execute("INCRBY", "k1", 2) == 3  # the error cost nothing else
    finally:
        await client.aclose()


async def test_a_lone_command_goes_out_at_once_and_a_busy_turn_s_in_one_write(redis_url):
    client = MultiplexedRedis(redis_url)
    try:
        assert await client.execute("PING") == b"PONG"  # connected
        replies = client._replies
        assert replies is not None
        real, writes = replies._transport, []

        class CountingTransport:
            def write(self, data: bytes) -> None:
                writes.append(data)
                real.write(data)

            def close(self) -> None:
                real.close()

        replies._transport = CountingTransport()  # type: ignore[assignment]
        lone = replies.send(["SET", "n", 0])
        assert len(writes) == 1  # written before the loop turned
        assert await lone == b"OK"
        writes.clear()
        counted = await asyncio.gather(*(client.execute("INCR", "n") for _ in range(5)))
        assert counted == [1, 2, 3, 4, 5]
        assert len(writes) == 2  # the first at once, the four behind it in one write
    finally:
        await client.aclose()


async def test_a_script_is_loaded_again_after_a_flush(redis_url, aredis):
    client = MultiplexedRedis(redis_url)
    script = client.script("return {KEYS[1], tonumber(ARGV[1]) * 2, ARGV[2]}")
    try:
        assert await script(keys=["a"], args=[21, 0.5]) == [b"a", 42, b"0.5"]
        await aredis.script_flush()
        assert await script(keys=["b"], args=[1, "x"]) == [b"b", 2, b"x"]
        with pytest.raises(NoScriptError):
            await client.execute("EVALSHA", "0" * 40, 0)
    finally:
        await client.aclose()


async def test_a_stuck_server_times_out_and_a_lost_one_is_reconnected(tmp_path):
    process, url = redis_on_free_port(tmp_path)
    client = MultiplexedRedis(url, timeout=0.2)
    try:
        assert await client.execute("PING") == b"PONG"
        # Redis stuck (stopped, its socket open): the command in flight gives up at its
        # timeout, and so does the one behind it on the same connection.
        os.kill(process.pid, signal.SIGSTOP)
        try:
            started = asyncio.get_running_loop().time()
            first = asyncio.ensure_future(client.execute("PING"))
            second = asyncio.ensure_future(client.execute("PING"))
            for call in (first, second):
                with pytest.raises(aioredis.TimeoutError):
                    await call
            assert asyncio.get_running_loop().time() - started < 1.0
        finally:
            os.kill(process.pid, signal.SIGCONT)
        assert await client.execute("PING") == b"PONG"  # on a new connection
        # The server gone: an error, not a hang; back: served again.
        process.stop()
        with pytest.raises((aioredis.ConnectionError, aioredis.TimeoutError)):
            await client.execute("PING")
        await asyncio.to_thread(process.start_ready, lambda: readiness.redis_ping(url))
        assert await client.execute("PING") == b"PONG"
    finally:
        await client.aclose()
        process.stop()


async def test_a_database_and_password_in_the_url_are_used(tmp_path):
    process, url = redis_on_free_port(tmp_path)
    admin = aioredis.Redis.from_url(url)
    try:
        await admin.config_set("requirepass", "s3cret")
        secured = url.replace("redis://", "redis://:s3cret@").replace("/0", "/3")
        client = MultiplexedRedis(secured)
        await client.execute("SET", "where", "db3")
        await client.aclose()
        checker = aioredis.Redis.from_url(secured)
        assert await checker.get("where") == b"db3"
        assert await checker.execute_command("SELECT", 0) and not await checker.get("where")
        await checker.aclose()
        wrong = MultiplexedRedis(url.replace("redis://", "redis://:nope@"))
        with pytest.raises(aioredis.ResponseError):
            await wrong.execute("PING")
        await wrong.aclose()
    finally:
        await admin.aclose()
        process.stop()
