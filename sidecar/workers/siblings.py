"""Exchange ends between the workers of one `serve --processes N`.

Envoy's access-log stream reaches one worker, but every worker decides exchanges and
holds their slots: an entry naming a sibling's slot goes to that sibling over a Unix
socket in the supervisor's private directory, which hands it to its own handler as if
it had come from Envoy. Entries travel pickled, each with its length in front (between
processes of one program and one user, never over a network).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import struct
from collections.abc import Callable

from sidecar.request.completion.access_log import ExchangeEnd
from sidecar.workers.worker import Worker

log = logging.getLogger(__name__)
_LENGTH = struct.Struct("!I")


class Siblings:
    def __init__(self, worker: Worker, on_end: Callable[[ExchangeEnd], None]) -> None:
        self._worker = worker
        self._on_end = on_end
        self._server: asyncio.base_events.Server | None = None
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._connecting: dict[int, asyncio.Task[asyncio.StreamWriter]] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self._incoming: set[asyncio.StreamWriter] = set()  # siblings sending here
        self._receiving: set[asyncio.Task[object]] = set()
        self.forwarded = 0  # ends sent to their sibling
        self.received = 0  # ends a sibling sent here

    async def start(self) -> None:
        path = self._worker.socket(self._worker.index)
        path.unlink(missing_ok=True)
        self._server = await asyncio.start_unix_server(self._receive, path=str(path))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._sending):
            task.cancel()
        for writer in [*self._writers.values(), *self._incoming]:
            writer.close()
        # Each incoming stream's reader then ends on its own.
        await asyncio.gather(*self._receiving, return_exceptions=True)

    def forward(self, end: ExchangeEnd) -> bool:
        """Send `end` to the sibling whose slot it names; False if it names none."""
        index = self._worker.sibling_of(end.slot)
        if index is None:
            return False
        frame = pickle.dumps(end)
        writer = self._writers.get(index)
        if writer is not None and not writer.is_closing():
            writer.write(_LENGTH.pack(len(frame)) + frame)
        else:  # first end for it, or it restarted: connect, then send
            task = asyncio.ensure_future(self._send_after_connecting(index, frame))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        self.forwarded += 1
        return True

    async def _send_after_connecting(self, index: int, frame: bytes) -> None:
        connecting = self._connecting.get(index)
        if connecting is None or connecting.done():
            connecting = asyncio.ensure_future(self._connect(index))
            self._connecting[index] = connecting
        try:
            writer = await asyncio.shield(connecting)
        except OSError as error:
            log.warning("exchange end not sent to worker %d: %s", index, error)
            return
        writer.write(_LENGTH.pack(len(frame)) + frame)

    async def _connect(self, index: int) -> asyncio.StreamWriter:
        _reader, writer = await asyncio.open_unix_connection(str(self._worker.socket(index)))
        self._writers[index] = writer
        return writer

    async def _receive(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._incoming.add(writer)
        task = asyncio.current_task()
        assert task is not None
        self._receiving.add(task)
        task.add_done_callback(self._receiving.discard)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
                end = pickle.loads(await reader.readexactly(length))
                self.received += 1
                try:
                    self._on_end(end)
                except Exception:  # one bad entry must not cost the stream
                    log.exception("handling a sibling's exchange end failed")
        self._incoming.discard(writer)
        writer.close()
