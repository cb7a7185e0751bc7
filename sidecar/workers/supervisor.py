"""`serve --processes N`: N worker processes behind one gRPC port, one admin port.

Each worker is a whole sidecar (`serve` again, named by QOS_WORKER) that binds the gRPC
port with SO_REUSEPORT: the kernel hands each new connection from Envoy to one of them,
and the workers share budgets, slots in flight and queues through Redis exactly as the
sidecars of several gateways do. Their access-log stream goes to one of them, which
passes every other worker's exchange ends on (workers/siblings.py).

The supervisor holds the admin port: /metrics merges the workers' (label `process`),
/healthz and /readyz answer for all of them, everything else (the dashboard, its API)
goes to the first worker that answers. A worker that dies is started again; SIGTERM is
passed on to every worker, which drains as a lone sidecar does.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import signal
import sys
import tempfile
from pathlib import Path

import aiohttp
from aiohttp import web

from sidecar import options
from sidecar.ports import free_port
from sidecar.settings import SidecarSettings
from sidecar.shutdown import EXIT_SECONDS
from sidecar.workers.merged_metrics import merge
from sidecar.workers.worker import WORKER_ENV, Worker

log = logging.getLogger(__name__)

RESTART_DELAY_SECONDS = 1.0
# How long a worker's loop may take to answer /healthz before it counts as wedged.
HEALTH_SECONDS = 3.0
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclasses.dataclass
class _Child:
    worker: Worker
    admin_port: int
    process: asyncio.subprocess.Process | None = None

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"


class Supervisor:
    def __init__(self, settings: SidecarSettings) -> None:
        self._settings = settings
        self._directory = Path(tempfile.mkdtemp(prefix="qos-sidecar-workers-"))
        os.chmod(self._directory, 0o700)  # the workers' sockets: this user only
        group = secrets.token_hex(3)
        count = settings.processes
        self._children = [
            _Child(Worker(index, count, group, self._directory), free_port())
            for index in range(count)
        ]
        # One token for the dashboard whichever worker serves it (made, and told to no
        # one, when none is given: the dashboard stays closed).
        self._token = settings.admin_token or secrets.token_urlsafe(24)
        self._stopping = False
        self._watchers: list[asyncio.Task[None]] = []
        self._http: aiohttp.ClientSession | None = None
        self._admin: web.AppRunner | None = None

    async def run(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # The first signal drains the workers; another is passed on (cutting theirs short).
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, lambda: self._signal() if stop.is_set() else stop.set())
        # A pass-through: no cookies kept between clients, bodies as the workers sent them.
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=10),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        try:
            for child in self._children:
                await self._start(child)
                self._watchers.append(asyncio.ensure_future(self._watch(child)))
            await self._serve_admin()
            log.info(
                "workers serving",
                extra={"grpc": self._settings.grpc_address, "processes": len(self._children)},
            )
            for closed in self._settings.closed():
                log.warning(closed)
            await stop.wait()
        finally:
            await self._stop()

    async def _start(self, child: _Child) -> None:
        worker_settings = dataclasses.replace(
            self._settings,
            processes=1,
            admin_host="127.0.0.1",
            admin_port=child.admin_port,
        )
        environment, flags = options.as_environment(
            dataclasses.replace(worker_settings, admin_token=self._token)
        )
        env = {**os.environ, **environment, WORKER_ENV: child.worker.to_env()}
        child.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sidecar", "serve", *flags,
            env=env, stdin=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

    async def _watch(self, child: _Child) -> None:
        """Start the worker again whenever it exits before the supervisor stops."""
        while not self._stopping:
            assert child.process is not None
            code = await child.process.wait()
            if self._stopping:
                return
            log.warning("worker %d exited (%s); starting it again", child.worker.index, code)
            await asyncio.sleep(RESTART_DELAY_SECONDS)
            if not self._stopping:
                await self._start(child)

    def _signal(self) -> None:
        for child in self._children:
            if child.process is not None and child.process.returncode is None:
                child.process.send_signal(signal.SIGTERM)

    async def _stop(self) -> None:
        self._stopping = True
        self._signal()
        # Each worker bounds its own exit; one that still runs past that is killed.
        bound = self._settings.drain_seconds + EXIT_SECONDS + 1
        for child in self._children:
            if child.process is not None:
                try:
                    await asyncio.wait_for(child.process.wait(), bound)
                except TimeoutError:
                    log.error("worker %d did not stop: killed", child.worker.index)
                    child.process.kill()
                    await child.process.wait()
        for watcher in self._watchers:
            watcher.cancel()
        if self._admin is not None:
            await self._admin.cleanup()
        if self._http is not None:
            await self._http.close()
        for path in self._directory.iterdir():
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self._directory.rmdir()

    async def _serve_admin(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_route("*", "/{tail:.*}", self._proxy)
        self._admin = web.AppRunner(app)
        await self._admin.setup()
        site = web.TCPSite(self._admin, self._settings.admin_host, self._settings.admin_port)
        await site.start()

    async def _get(
        self, child: _Child, path: str, seconds: float | None = None
    ) -> tuple[int, str] | None:
        assert self._http is not None
        timeout = aiohttp.ClientTimeout(total=seconds) if seconds else None
        try:
            async with self._http.get(child.admin_url + path, timeout=timeout) as response:
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def _metrics(self, _request: web.Request) -> web.Response:
        answers = await asyncio.gather(*(self._get(c, "/metrics") for c in self._children))
        texts = {
            child.worker.index: answer[1]
            for child, answer in zip(self._children, answers, strict=True)
            if answer is not None and answer[0] == 200
        }
        return web.Response(
            body=merge(texts), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    async def _healthz(self, _request: web.Request) -> web.Response:
        """Alive when every worker runs and its loop answers its own /healthz within
        HEALTH_SECONDS: a wedged worker fails the liveness probe like a dead one."""
        alive = [c.process is not None and c.process.returncode is None for c in self._children]
        if not all(alive):
            return web.Response(status=503, text=f"{alive.count(False)} worker(s) down\n")
        answers = await asyncio.gather(
            *(self._get(c, "/healthz", HEALTH_SECONDS) for c in self._children)
        )
        stuck = [
            child.worker.index
            for child, answer in zip(self._children, answers, strict=True)
            if answer is None or answer[0] != 200
        ]
        if stuck:
            return web.Response(status=503, text=f"worker(s) {stuck} do not answer\n")
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        answers = await asyncio.gather(*(self._get(c, "/readyz") for c in self._children))
        ready = sum(1 for answer in answers if answer is not None and answer[0] == 200)
        if ready == len(self._children):
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"{ready} of {len(self._children)} ready\n")

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        """The dashboard and its API: any worker serves them (their state is in Redis)."""
        assert self._http is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["X-Forwarded-For"] = request.remote or "unknown address"  # who switched
        for child in self._children:
            try:
                async with self._http.request(
                    request.method,
                    child.admin_url + request.path_qs,
                    headers=headers,
                    data=body,
                    allow_redirects=False,  # the client's to follow, with its cookie
                ) as answer:
                    kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
                    return web.Response(
                        status=answer.status, body=await answer.read(), headers=kept
                    )
            except (aiohttp.ClientError, TimeoutError):
                continue  # that worker is restarting: the next one
        return web.Response(status=503, text="no worker answers\n")


def run(settings: SidecarSettings) -> None:
    asyncio.run(Supervisor(settings).run())
