"""Who may use the dashboard: holders of the admin token, from the dashboard's own page.

The token comes once in the link (`/dashboard?token=…`) and is kept in an HttpOnly,
SameSite=Strict cookie; scripts may send it as `Authorization: Bearer …` instead. A
change (POST) must also carry the `X-QoS-Request` header, which a cross-site form cannot
send and a cross-site script cannot send without a CORS preflight this server never
grants, and an Origin, when the browser sends one, of this very server.
"""

from __future__ import annotations

import hmac

from aiohttp import web

COOKIE = "qos_admin"
REQUEST_HEADER = "X-QoS-Request"


def presented_token(request: web.Request) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token:
        return token.strip()
    return request.cookies.get(COOKIE, "")


def via(request: web.Request) -> str:
    """How a change came: from the page (its cookie) or a script (a bearer token)."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return "api" if scheme.lower() == "bearer" and token else "dashboard"


def authorized(request: web.Request, token: str) -> bool:
    return hmac.compare_digest(presented_token(request).encode(), token.encode())


def same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    return origin is None or origin == f"{request.scheme}://{request.host}"


def check(request: web.Request, token: str) -> None:
    """Raise the HTTP error that refuses this request, if any."""
    if not authorized(request, token):
        raise web.HTTPUnauthorized(text="admin token required: open /dashboard?token=…\n")
    if request.method != "GET" and (
        request.headers.get(REQUEST_HEADER) is None or not same_origin(request)
    ):
        raise web.HTTPForbidden(text="cross-site request refused\n")


def login(request: web.Request, token: str) -> web.StreamResponse:
    """`/dashboard?token=…`: keep the token in a cookie and drop it from the address."""
    offered = request.query.get("token", "")
    if not hmac.compare_digest(offered.encode(), token.encode()):
        raise web.HTTPUnauthorized(text="wrong admin token\n")
    response = web.HTTPSeeOther(location="/dashboard")
    response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
    return response
