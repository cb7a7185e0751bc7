"""The ops dashboard on the sidecar's admin port: a page, its state, its switches."""

from __future__ import annotations

import contextlib
import json
import time
from importlib import resources
from typing import Any

import redis.asyncio as redis
from aiohttp import web

from sidecar.config.audit import Actor, clean_name
from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode, OperatorMode
from sidecar.config.snapshot import Snapshot
from sidecar.config.store import StoreLost
from sidecar.config.switches import switch_mode, switch_shed
from sidecar.operator.dashboard import auth
from sidecar.operator.gateway_view import GatewayView
from sidecar.operator.history.recorder import REREAD_SECONDS, HistoryRecorder

STATIC = resources.files("sidecar.operator.dashboard").joinpath("static")
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


def add_routes(
    app: web.Application,
    gateway: GatewayView,
    recorder: HistoryRecorder,
    token: str,
    behind_supervisor: bool = False,  # a worker of `serve --processes N`
) -> None:
    async def page(request: web.Request) -> web.StreamResponse:
        if "token" in request.query:
            return auth.login(request, token)
        auth.check(request, token)
        return _static("index.html")

    async def static(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in ("dashboard.js", "history.js", "charts.js", "dashboard.css"):
            raise web.HTTPNotFound()
        return _static(name)

    async def state(request: web.Request) -> web.Response:
        auth.check(request, token)
        return web.json_response(_state(gateway, recorder))

    async def switch(request: web.Request, change) -> web.Response:
        """Apply `change(body, current mode)` → (the new mode, what changed), for every
        sidecar, recording who switched: the name the body gives, and where from."""
        auth.check(request, token)
        body = await _json(request)
        held = gateway.watcher.current
        changed, what = change(body, held.mode)
        name, remote = clean_name(body.get("by")), _client_address(request, behind_supervisor)
        by = f"{name} from {remote}" if name else remote
        try:
            await gateway.config_store.save_mode(
                changed, held.store_id, what=what, actor=Actor(by, auth.via(request))
            )
        except StoreLost:
            raise web.HTTPServiceUnavailable(
                text="Redis lost the configuration; the sidecars are putting it back: "
                "switch again in a few seconds\n"
            ) from None
        # The answer shows this switch; should the read fail, it is switched all the same
        # and the next look reads it.
        with contextlib.suppress(redis.RedisError, OSError):
            await gateway.watcher.refresh()
        recorder.read_events()
        return web.json_response(_state(gateway, recorder))

    async def set_mode(request: web.Request) -> web.Response:
        return await switch(
            request, lambda body, mode: switch_mode(mode, _enum(Mode, body.get("mode"), "mode"))
        )

    async def shed(request: web.Request) -> web.Response:
        def change(body: dict[str, Any], mode: OperatorMode) -> tuple[OperatorMode, str]:
            return switch_shed(mode, _enum(Tier, body.get("tier"), "tier"), bool(body.get("shed")))

        return await switch(request, change)

    async def history(request: web.Request) -> web.Response:
        """The last ten minutes, cluster-wide (built once a second: history/recorder.py)."""
        auth.check(request, token)
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(
                body=recorder.page_gzip,
                content_type="application/json",
                headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"},
            )
        return web.Response(
            body=recorder.page,
            content_type="application/json",
            headers={"Vary": "Accept-Encoding"},
        )

    app.router.add_get("/dashboard", page)
    app.router.add_get("/dashboard/static/{name}", static)
    app.router.add_get("/dashboard/api/state", state)
    app.router.add_get("/dashboard/api/history", history)
    app.router.add_post("/dashboard/api/mode", set_mode)
    app.router.add_post("/dashboard/api/shed", shed)


def _enum(kind, value: Any, field: str):
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise web.HTTPBadRequest(text=f"{field}: one of {choices}\n") from None


def _static(name: str) -> web.Response:
    suffix = name[name.rindex(".") :]
    return web.Response(
        body=STATIC.joinpath(name).read_bytes(),
        content_type=_TYPES[suffix],
        headers={
            "Cache-Control": "no-store",
            "X-Frame-Options": "DENY",
            "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
        },
    )


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"{}")
    except ValueError:
        raise web.HTTPBadRequest(text="a JSON body is expected\n") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="a JSON object is expected\n")
    return body


def _pools(gateway: GatewayView, snapshot: Snapshot) -> list[dict[str, Any]]:
    """Each model pool's load, limit, capacity in force and shedding."""
    pools = []
    for pool in snapshot.pools:
        state = gateway.monitor.state.for_pool(pool.name)
        capacity = state.capacity(pool)
        pools.append(
            {
                "pool": pool.name,
                "models": sorted(pool.models),
                "pods": len(state.load.pods),
                "free_kv": state.load.as_reported.free_kv_ratio,
                "projected_free_kv": state.load.free_kv_ratio,
                "slots": gateway.queue.cluster_in_flight_in(pool.name),
                "max_concurrency": pool.fleet.max_concurrency,
                "capacity": capacity,
                "rates": {t.value: snapshot.share(t, pool) * capacity for t in Tier},
                "shedding": {
                    t.value: reason.value for t, reason in state.shedding.items() if reason
                },
            }
        )
    return pools


def _state(gateway: GatewayView, history: HistoryRecorder) -> dict[str, Any]:
    snapshot = gateway.watcher.current
    load = gateway.monitor.state.load
    # Cluster-wide, from the history every sidecar adds to: the same on every gateway's
    # page, and there from the first poll.
    rates = history.window.tier_rates(settled_after=REREAD_SECONDS)
    tiers = {}
    for tier in Tier:
        compliance = gateway.controller.compliance[tier]
        overload = gateway.monitor.state.shedding[tier]
        counted = rates.get(tier.value, {"admitted": 0.0, "shed": 0.0})
        in_flight, waiting = gateway.queue.cluster_by_tier(tier)  # every gateway's
        tiers[tier.value] = {
            "admitted_per_second": counted["admitted"],
            "shed_per_second": counted["shed"],
            "in_flight": in_flight,
            "waiting": waiting,
            "compliance": compliance.ratio,
            "samples": compliance.samples,
            "target": snapshot.config.slo.targets[tier].compliance,
            "share": snapshot.share(tier),
            "rate": snapshot.tier_rate(tier),
            "overload": overload.value if overload else None,
        }
    # Both as the history last read them (history/recorder.py): no Redis call a poll.
    adjustments = history.moves[:10]
    switches = [change.to_dict() for change in history.switches[:20]]
    return {
        "at": time.time(),
        "pools": _pools(gateway, snapshot),
        "mode": snapshot.mode.mode.value,
        "force_shed": sorted(t.value for t in snapshot.mode.force_shed),
        "config_version": snapshot.version,
        "tiers": tiers,
        "pods": [
            {
                "pod": p.pod_id,
                "kv_usage": p.kv_cache_usage,
                "running": p.running,
                "waiting": p.waiting,
                "age": p.age_seconds,
            }
            for p in load.as_reported.pods
        ],
        "free_kv": load.as_reported.free_kv_ratio,
        "projected_free_kv": load.free_kv_ratio,
        "in_flight": gateway.queue.cluster_in_flight,
        "leader": gateway.controller.leading,
        "adjustments": adjustments,
        "switches": switches,
    }


def _client_address(request: web.Request, behind_supervisor: bool) -> str:
    """Who asked: a worker of `serve --processes` is asked by its supervisor, on loopback,
    which names the client in X-Forwarded-For."""
    forwarded = request.headers.get("X-Forwarded-For")
    if behind_supervisor and forwarded and request.remote in ("127.0.0.1", "::1"):
        return forwarded.rsplit(",", 1)[-1].strip()
    return request.remote or "unknown address"
