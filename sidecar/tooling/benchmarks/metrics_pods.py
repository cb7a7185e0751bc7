"""Many model-server pods' /metrics, from one process: the same exposition file served
on each of `--ports` loopback ports (the pods a scraping sidecar reads in bench/scrape.py).

Run: .venv/bin/python -m sidecar.tooling.benchmarks.metrics_pods --file F --ports 9001,9002
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from aiohttp import web


async def serve(text: bytes, ports: list[int]) -> None:
    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=text, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)

    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/health", health)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for port in ports:
        await web.TCPSite(runner, "127.0.0.1", port).start()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, required=True)
    parser.add_argument("--ports", required=True, help="comma-separated")
    args = parser.parse_args()
    ports = [int(p) for p in args.ports.split(",")]
    asyncio.run(serve(args.file.read_bytes(), ports))
