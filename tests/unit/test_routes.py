"""The route table: every spelling of a path decides as the path the server routes on,
unknown POSTs and the engines' controls are refused, GETs pass."""

from __future__ import annotations

import pytest

from sidecar.routes.kinds import RouteKind
from sidecar.routes.paths import canonical_path
from sidecar.routes.table import (
    BUILT_IN,
    OPERATIONAL,
    RESOLVED_KEPT,
    RouteInvalid,
    RouteTable,
    build,
)

SPELLINGS = [
    "/v1/chat/completions",
    "/v1/chat/%63ompletions",
    "/v1/chat%2Fcompletions",
    "/v1/chat%2fcompletions",
    "//v1//chat///completions",
    "/v1/./chat/completions",
    "/v1/x/../chat/completions",
    "/v1/chat/completions/",
    "/v1/chat/completions?stream=true",
    "/v1/chat/completions#x",
    "/%76%31/chat/completions",
]


@pytest.mark.parametrize("raw", SPELLINGS)
def test_every_spelling_is_the_path_the_server_routes_on(raw):
    assert canonical_path(raw) == "/v1/chat/completions"
    assert RouteTable().resolve("POST", raw).kind is RouteKind.CHAT


def test_case_and_double_encoding_are_other_paths_and_so_refused():
    # Starlette routes case-sensitively and decodes once: these reach no handler there.
    table = RouteTable()
    assert table.resolve("POST", "/V1/chat/completions").kind is RouteKind.REFUSE
    assert canonical_path("/v1/chat/%2563ompletions") == "/v1/chat/%63ompletions"
    assert table.resolve("POST", "/v1/chat/%2563ompletions").kind is RouteKind.REFUSE


@pytest.mark.parametrize("path,kind", sorted(BUILT_IN.items()))
def test_built_in_routes_resolve_to_their_kind(path, kind):
    concrete = path.replace("*", "resp_123")
    assert RouteTable().resolve("POST", concrete).kind is kind


def test_unknown_posts_are_refused_and_gets_pass():
    table = RouteTable()
    assert table.resolve("POST", "/v1/something/new").kind is RouteKind.REFUSE
    assert table.resolve("PUT", "/v1/chat/completions").kind is RouteKind.REFUSE
    assert table.resolve("DELETE", "/v1/whatever").kind is RouteKind.REFUSE
    for path in ("/v1/models", "/v1/models/m", "/health", "/v1/responses/resp_1", "/ping"):
        assert table.resolve("GET", path).kind is RouteKind.PASS
        assert table.resolve("HEAD", path).kind is RouteKind.PASS
    # What clients do not read is refused: the engines' insides, and anything unknown.
    for path in ("/metrics", "/version", "/load", "/info", "/openapi.json", "/v1/whatever"):
        assert table.resolve("GET", path).kind is RouteKind.REFUSE, path
    # An operator may list more reads.
    assert build({"/v1/whatever": "pass"}).resolve("GET", "/v1/whatever").kind is RouteKind.PASS
    # A generation route asked with GET does no work (the server answers 405).
    assert table.resolve("GET", "/v1/chat/completions").kind is RouteKind.PASS


@pytest.mark.parametrize("path", sorted(OPERATIONAL))
def test_the_engines_controls_are_refused_for_every_method(path):
    table = RouteTable()
    for method in ("POST", "GET", "PUT"):
        assert table.resolve(method, path).kind is RouteKind.REFUSE
    assert table.resolve("POST", path.replace("_", "%5F") + "/").kind is RouteKind.REFUSE


def test_upgrades_are_refused_unless_the_route_is_listed_as_a_websocket():
    assert RouteTable().resolve("GET", "/v1/realtime", upgrade=True).kind is RouteKind.REFUSE
    table = build({"/v1/realtime": "websocket"})
    assert table.resolve("GET", "/v1/realtime", upgrade=True).kind is RouteKind.PASS
    assert table.resolve("GET", "/v1/models", upgrade=True).kind is RouteKind.REFUSE


def test_operators_add_routes_and_change_built_in_ones():
    table = build({"/v1/my/generate": "chat", "/v1/chat/completions/batch": "refuse"})
    assert table.resolve("POST", "/v1/my/generate").kind is RouteKind.CHAT
    assert table.resolve("POST", "/v1/chat/completions/batch").kind is RouteKind.REFUSE
    assert build({"/v1/tenants/*/chat": "pass"}).resolve("POST", "/v1/tenants/a/chat").listed


@pytest.mark.parametrize(
    "routes,named",
    [
        ({"/pause": "pass"}, "operational"),
        ({"/v1/x": "gpu"}, "not a route kind"),
        ({"v1/x": "pass"}, "not a path"),
        ({"/v1//x": "pass"}, "as the server routes it"),
        ({"/v1/x?y=1": "pass"}, "as the server routes it"),
    ],
)
def test_routes_the_gateway_cannot_take_are_refused_with_their_reason(routes, named):
    with pytest.raises(RouteInvalid, match=named):
        build(routes)


def test_resolved_routes_are_kept_within_a_bound_and_stay_right():
    table = RouteTable()
    chat = table.resolve("POST", "/v1/chat/completions")
    assert table.resolve("POST", "/v1/chat/completions") is chat  # kept
    # A client inventing paths cannot grow the memo past its bound, nor change answers.
    for index in range(RESOLVED_KEPT + 10):
        assert table.resolve("POST", f"/made/up/{index}").kind is RouteKind.REFUSE
    assert len(table._resolved) <= RESOLVED_KEPT
    assert table.resolve("POST", "/v1/chat/completions") == chat
    assert table.resolve("GET", "/v1/chat/completions").kind is not chat.kind
    assert table.resolve("POST", "/v1/chat/completions", upgrade=True).kind is RouteKind.REFUSE
