"""A stand-in model server that routes as vLLM's does (Starlette, served by uvicorn) and
records every request that reaches it, routed or not: the gateway's tests read the record
to see what got through. `python -m uvicorn tests.integration.starlette_upstream:app`.
GET /__recorded (asked directly, not through the gateway) returns the record."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sidecar.routes.table import BUILT_IN, OPERATIONAL

RECORD: list[dict[str, object]] = []


async def served(request: Request) -> Response:
    """The path it was served on, and the JSON body as it arrived (None: not JSON)."""
    try:
        received = await request.json()
    except ValueError:
        received = None
    return JSONResponse({"served": request.url.path, "received": received})


async def recorded(_request: Request) -> Response:
    return JSONResponse(RECORD)


class Recording:
    """Every request, with the path Starlette will route on and the gateway's tags."""

    def __init__(self, app: Starlette) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http" and scope["path"] != "/__recorded":
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            RECORD.append(
                {
                    "method": scope["method"],
                    "path": scope["path"],
                    "raw_path": scope.get("raw_path", b"").decode("latin-1"),
                    "tier": headers.get("x-qos-tier"),
                    "key": headers.get("authorization", "").removeprefix("Bearer "),
                    "decision": headers.get("x-qos-decision"),
                }
            )
        await self.app(scope, receive, send)


paths = {path.replace("*", "{id}") for path in (*BUILT_IN, *OPERATIONAL)}
routes = [Route(path, served, methods=["POST", "GET"]) for path in sorted(paths)]
app = Recording(
    Starlette(routes=[Route("/__recorded", recorded), *routes, Route("/v1/models", served)])
)
