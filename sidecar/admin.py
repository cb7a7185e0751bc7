"""The sidecar's admin HTTP server: liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sidecar.metrics import SidecarMetrics


def admin_app(
    metrics: SidecarMetrics,
    not_ready: Callable[[], str | None],
    notes: Callable[[], list[str]] = list,
) -> web.Application:
    """Health and metrics, open (bind the admin port to localhost or a private network);
    the dashboard adds its own routes, behind the admin token. `notes`: what a ready
    sidecar says beside it (a configuration file refused, while the last good serves)."""

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_request: web.Request) -> web.Response:
        reason = not_ready()  # None: ready
        if reason is None:
            return web.Response(text="".join(f"{line}\n" for line in ["ready", *notes()]))
        return web.Response(status=503, text=f"not ready: {reason}\n")

    async def prometheus(_request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", prometheus)
    return app
