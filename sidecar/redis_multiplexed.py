"""One Redis connection that every decision shares at once, for the budget call.

redis-py takes a connection from its pool for each command, bounds it with a timer of its
own and parses the reply in Python; for the one EVALSHA a decision makes, that machinery
cost several times the call itself (docs/benchmarks.md). Here commands are written as
they come on one connection, and their replies, which Redis sends back in order, resolve
them in turn: hiredis packs and parses, and one timer watches the oldest command rather
than one timer a command.

Errors are redis-py's (ResponseError, NoScriptError, ConnectionError, TimeoutError), so
callers handle both clients alike. A single server only, reached by a redis://, rediss://
or unix:// URL (user, password, db); a cluster goes through redis-py's cluster client.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import ssl
import typing
from collections.abc import Sequence
from typing import Any

import hiredis
import redis.asyncio as redis
from redis.connection import parse_url
from redis.exceptions import NoScriptError

Arg = str | bytes | int | float


class _Replies(asyncio.Protocol):
    """Commands in flight on one connection, answered in the order they were sent."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._reader = hiredis.Reader()
        self._waiting: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        self._transport: asyncio.Transport | None = None
        self._unsent: list[bytes] = []
        self._watch: asyncio.TimerHandle | None = None
        self.lost: Exception | None = None

    @property
    def usable(self) -> bool:
        return self._transport is not None and self.lost is None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Any loop's transport (uvloop's are not asyncio.Transport subclasses).
        self._transport = typing.cast(asyncio.Transport, transport)

    def send(self, args: Sequence[Arg]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        command = hiredis.pack_command(tuple(args))  # type: ignore[arg-type]
        idle = not self._waiting and not self._unsent
        self._waiting.append((reply, loop.time() + self._timeout))
        if idle and self._transport is not None and self.lost is None:
            # Nothing in flight: out at once, not a turn of the loop later (a quiet
            # sidecar's decision waits for no one).
            self._transport.write(command)
        else:
            # Busy: the commands of one turn of the loop (decisions of many streams) go
            # out in one write; a system call costs more than packing a command.
            if not self._unsent:
                loop.call_soon(self._flush)
            self._unsent.append(command)
        if self._watch is None:
            self._watch = loop.call_at(self._waiting[0][1], self._check)
        return reply

    def _flush(self) -> None:
        unsent, self._unsent = self._unsent, []
        if self._transport is not None and self.lost is None:
            self._transport.write(b"".join(unsent))

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (value := self._reader.gets()) is not False:
            reply, _ = self._waiting.popleft()
            if reply.done():  # its caller gave up waiting
                continue
            if isinstance(value, hiredis.ReplyError):
                reply.set_exception(_error(str(value)))
            else:
                reply.set_result(value)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(redis.ConnectionError(f"Redis connection lost: {exc or 'closed'}"))

    def close(self) -> None:
        self._fail(redis.ConnectionError("Redis connection closed"))

    def _check(self) -> None:
        """The oldest command had its time: the connection is taken for dead (as redis-py
        drops a connection whose read timed out); else look again when the next is due."""
        self._watch = None
        if not self._waiting:
            return
        loop = asyncio.get_running_loop()
        if self._waiting[0][1] <= loop.time():
            self._fail(redis.TimeoutError("Timeout reading from Redis"))
        else:
            self._watch = loop.call_at(self._waiting[0][1], self._check)

    def _fail(self, error: Exception) -> None:
        if self.lost is None:
            self.lost = error
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        while self._waiting:
            reply, _ = self._waiting.popleft()
            if not reply.done():
                reply.set_exception(error)
        if self._transport is not None:
            self._transport.close()


def _error(message: str) -> redis.ResponseError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    return redis.ResponseError(message)


# What a URL may say for this client (parse_url's names); with more, redis-py serves it.
_UNDERSTOOD = {"host", "port", "path", "db", "username", "password", "connection_class"}


def understands(url: str) -> bool:
    try:
        return set(parse_url(url)) <= _UNDERSTOOD
    except ValueError:
        return False


class MultiplexedRedis:
    """A single Redis server at `url`, one connection, made again when it is lost."""

    def __init__(self, url: str, timeout: float = 0.25) -> None:
        options = parse_url(url)
        self._host = options.get("host", "localhost")
        self._port = int(options.get("port", 6379))
        self._path = options.get("path")
        self._db = int(options.get("db", 0))
        self._username = options.get("username")
        self._password = options.get("password")
        self._tls = url.startswith("rediss://")
        self._timeout = timeout
        self._replies: _Replies | None = None
        self._connecting: asyncio.Task[_Replies] | None = None

    async def execute(self, *args: Arg) -> Any:
        replies = self._replies
        if replies is None or not replies.usable:
            replies = await self._connected()
        return await replies.send(args)

    def script(self, text: str) -> MultiplexedScript:
        return MultiplexedScript(self, text)

    async def aclose(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
        if self._replies is not None:
            self._replies.close()
            self._replies = None

    async def _connected(self) -> _Replies:
        # Callers arriving while the connection is being made wait for that one.
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
        return await asyncio.shield(self._connecting)

    async def _connect(self) -> _Replies:
        loop = asyncio.get_running_loop()
        timeout = self._timeout

        def protocol() -> _Replies:
            return _Replies(timeout)

        try:
            async with asyncio.timeout(timeout):
                if self._path:
                    _, replies = await loop.create_unix_connection(protocol, self._path)
                else:
                    tls = ssl.create_default_context() if self._tls else None
                    _, replies = await loop.create_connection(
                        protocol, self._host, self._port, ssl=tls
                    )
                if self._password is not None:
                    who = [self._username] if self._username else []
                    await replies.send(["AUTH", *who, self._password])
                if self._db:
                    await replies.send(["SELECT", self._db])
        except TimeoutError as error:
            raise redis.TimeoutError(f"Timeout connecting to Redis: {error}") from error
        except OSError as error:
            raise redis.ConnectionError(f"Error connecting to Redis: {error}") from error
        self._replies = replies
        return replies


class MultiplexedScript:
    """A Lua script called by its SHA, loaded again when Redis answers NOSCRIPT (after a
    restart, a failover or SCRIPT FLUSH), as redis-py's registered scripts do."""

    def __init__(self, client: MultiplexedRedis, text: str) -> None:
        self._client = client
        self._text = text
        self._sha = hashlib.sha1(text.encode()).hexdigest()

    async def __call__(self, keys: Sequence[Arg] = (), args: Sequence[Arg] = ()) -> Any:
        try:
            return await self._client.execute("EVALSHA", self._sha, len(keys), *keys, *args)
        except NoScriptError:
            await self._client.execute("SCRIPT", "LOAD", self._text)
            return await self._client.execute("EVALSHA", self._sha, len(keys), *keys, *args)
