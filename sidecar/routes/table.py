"""The route table: method + path -> what admission does with the request. Deny by default.

Resolved once per configuration version (the built-in routes, then the operator's
`routes.*`) into a `RouteTable`; a request's `Route` is looked up on its canonical path
(sidecar/routes/paths.py). What the table does not know is refused with a 404: a GET
or HEAD passes only on the reads clients make (`/v1/models`, a stored response,
`/health`), never onto the engines' insides, and never when it upgrades the connection
(a WebSocket: vLLM's /v1/realtime) unless listed; any other method is refused, so a
route a new engine release adds is never an unmetered way to its GPUs.
The engines' operational routes (pause, sleep, weights, LoRA, profiling, ...) and their
insides (metrics, versions, load, server facts) are refused for every method and cannot
be configured open; Envoy refuses them too, so they stay shut while the sidecar is down.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sidecar.routes.kinds import RouteKind
from sidecar.routes.paths import canonical_path

# Where a path segment may be anything (`/v1/responses/*/cancel`).
WILDCARD = "*"
# The configured kind of a route that may upgrade its connection (vLLM's /v1/realtime).
WEBSOCKET = "websocket"

_K = RouteKind
BUILT_IN: Mapping[str, RouteKind] = {
    # Generation, charged by their bodies.
    "/v1/chat/completions": _K.CHAT,
    "/v1/completions": _K.COMPLETIONS,
    "/v1/chat/completions/batch": _K.CHAT_BATCH,
    "/v1/responses": _K.RESPONSES,
    "/v1/messages": _K.MESSAGES,
    "/invocations": _K.INVOCATIONS,
    "/cohere/v2/chat": _K.COHERE_CHAT,
    "/generate": _K.GENERATE,  # SGLang and TGI
    "/generate_stream": _K.GENERATE,  # TGI
    "/inference/v1/generate": _K.GENERATE,  # vLLM's tokens-in, tokens-out
    "/generative_scoring": _K.INPUT_ONLY,
    # Input only: the prompt is all the GPU sees.
    "/v1/embeddings": _K.INPUT_ONLY,
    "/v2/embed": _K.INPUT_ONLY,
    "/pooling": _K.INPUT_ONLY,
    "/classify": _K.INPUT_ONLY,
    "/score": _K.INPUT_ONLY,
    "/v1/score": _K.INPUT_ONLY,
    "/rerank": _K.INPUT_ONLY,
    "/v1/rerank": _K.INPUT_ONLY,
    "/v2/rerank": _K.INPUT_ONLY,
    "/v1/audio/transcriptions": _K.AUDIO,
    "/v1/audio/translations": _K.AUDIO,
    # No GPU work: tokenizing, rendering templates, counting, cancelling, health.
    "/tokenize": _K.PASS,
    "/detokenize": _K.PASS,
    "/v1/messages/count_tokens": _K.PASS,
    "/v1/chat/completions/render": _K.PASS,
    "/v1/completions/render": _K.PASS,
    "/v1/responses/render": _K.PASS,
    "/v1/messages/render": _K.PASS,
    "/v1/chat/completions/derender": _K.PASS,
    "/v1/completions/derender": _K.PASS,
    "/v1/responses/*/cancel": _K.PASS,
    "/ping": _K.PASS,
}

# The engines' own controls: never a client's to reach through the gateway.
OPERATIONAL: frozenset[str] = frozenset(
    {
        # vLLM
        "/pause", "/resume", "/is_paused", "/sleep", "/wake_up", "/is_sleeping",
        "/release_kv_cache_memory", "/abort_requests", "/inference/v1/abort_requests",
        "/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache",
        "/scale_elastic_ep", "/is_scaling_elastic_ep", "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter", "/collective_rpc", "/update_weights",
        "/start_weight_update", "/finish_weight_update", "/start_draft_weight_update",
        "/init_weight_transfer_engine", "/shutdown_weight_transfer_engine",
        "/update_weight_version", "/weight_checker", "/weight_info", "/get_world_size",
        "/start_profile", "/stop_profile", "/server_info", "/fault_tolerance/apply",
        "/fault_tolerance/status", "/kv_event_sources",
        # SGLang
        "/flush_cache", "/update_weights_from_disk", "/update_weights_from_tensor",
        "/update_weights_from_distributed", "/init_weights_update_group",
        "/release_memory_occupation", "/resume_memory_occupation", "/abort_request",
        "/configure_logging", "/set_internal_state", "/get_server_info", "/slow_down",
        "/open_session", "/close_session", "/load_lora_adapter", "/unload_lora_adapter",
        "/pause_generation", "/continue_generation", "/start_expert_distribution_record",
        "/stop_expert_distribution_record", "/dump_expert_distribution_record",
        # Their insides: figures and facts that are the operator's, not a client's.
        "/metrics", "/version", "/load", "/docs", "/redoc", "/openapi.json",  # vLLM
        "/get_model_info", "/get_load", "/health_generate",  # SGLang
        "/info",  # TGI
        "/props", "/slots",  # llama.cpp
    }
)  # fmt: skip

# What clients read with a GET or HEAD: the models served, a stored response, health.
CLIENT_READS = ("/v1/models", "/v1/models/*", "/v1/responses/*", "/health")

_PASSING_METHODS = ("GET", "HEAD")


class RouteInvalid(ValueError):
    """A `routes.*` entry the gateway cannot take."""


@dataclass(frozen=True)
class Route:
    kind: RouteKind
    path: str  # canonical: what the model server routes on
    listed: bool  # in the table (else judged by its method alone)


Patterns = tuple[tuple[tuple[str, ...], RouteKind], ...]


def _split(routes: Mapping[str, RouteKind]) -> tuple[dict[str, RouteKind], Patterns]:
    """Exact paths, and the paths with a wildcard segment as patterns."""
    exact = {p: k for p, k in routes.items() if WILDCARD not in p.split("/")}
    patterns = tuple(
        (tuple(p.strip("/").split("/")), k) for p, k in routes.items() if p not in exact
    )
    return exact, patterns


RESOLVED_KEPT = 4096

_READS: Patterns = tuple(
    (tuple(path.strip("/").split("/")), RouteKind.PASS) for path in CLIENT_READS
)


@dataclass(frozen=True)
class RouteTable:
    exact: Mapping[str, RouteKind] = field(default_factory=lambda: _split(BUILT_IN)[0])
    patterns: Patterns = field(default_factory=lambda: _split(BUILT_IN)[1])
    # Paths listed (by the operator) for connection upgrades, such as WebSockets.
    upgrades: frozenset[str] = frozenset()
    # Requests come by a few paths, over and over: each spelling is resolved once.
    _resolved: dict[tuple[str, str, bool], Route] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def resolve(self, method: str, raw_path: str, upgrade: bool = False) -> Route:
        key = (method, raw_path, upgrade)
        route = self._resolved.get(key)
        if route is None:
            if len(self._resolved) >= RESOLVED_KEPT:  # a client making paths up
                self._resolved.clear()
            route = self._resolved[key] = self._resolve(method, raw_path, upgrade)
        return route

    def _resolve(self, method: str, raw_path: str, upgrade: bool) -> Route:
        path = canonical_path(raw_path)
        if path in OPERATIONAL:
            return Route(RouteKind.REFUSE, path, listed=True)
        kind = self._listed(path)
        if upgrade:
            # A protocol upgrade only where the operator allowed one; never charged
            # here (its messages flow after the decision).
            allowed = path in self.upgrades
            return Route(RouteKind.PASS if allowed else RouteKind.REFUSE, path, allowed)
        if kind is not None:
            if kind.charged and method != "POST":
                # A generation route answers other methods itself (405); nothing to charge.
                passing = method in _PASSING_METHODS
                return Route(RouteKind.PASS if passing else RouteKind.REFUSE, path, True)
            return Route(kind, path, listed=True)
        if method in _PASSING_METHODS and _matches(path, _READS):
            return Route(RouteKind.PASS, path, listed=False)
        return Route(RouteKind.REFUSE, path, listed=False)

    def _listed(self, path: str) -> RouteKind | None:
        kind = self.exact.get(path)
        if kind is not None:
            return kind
        return _matches(path, self.patterns)


def _matches(path: str, patterns: Patterns) -> RouteKind | None:
    """The kind of the first pattern `path` matches, segment by segment."""
    segments = tuple(path.strip("/").split("/"))
    for pattern, kind in patterns:
        if len(pattern) == len(segments) and all(
            p in (WILDCARD, s) for p, s in zip(pattern, segments, strict=True)
        ):
            return kind
    return None


def build(configured: Mapping[str, str]) -> RouteTable:
    """The built-in routes with the operator's laid over them: `{path: kind}`, where a
    kind is a RouteKind's name or `websocket` (passes, and may upgrade the connection)."""
    merged: dict[str, RouteKind] = dict(BUILT_IN)
    opened: set[str] = set()
    for raw, name in configured.items():
        path = _configured_path(raw)
        if name == WEBSOCKET:
            opened.add(path)
            name = RouteKind.PASS.value
        try:
            merged[path] = RouteKind(name)
        except ValueError:
            kinds = ", ".join([*(kind.value for kind in RouteKind), WEBSOCKET])
            raise RouteInvalid(f"routes.{raw}: {name!r} is not a route kind ({kinds})") from None
    exact, patterns = _split(merged)
    return RouteTable(exact, patterns, frozenset(opened))


def _configured_path(raw: str) -> str:
    if not raw.startswith("/"):
        raise RouteInvalid(f"routes: {raw!r} is not a path (it starts with /)")
    path = canonical_path(raw)
    if path != raw.rstrip("/") or "?" in raw:
        raise RouteInvalid(f"routes: write {raw!r} as the server routes it, {path!r}")
    if path in OPERATIONAL:
        raise RouteInvalid(
            f"routes: {path} is an engine's operational route; it is never served through "
            "the gateway"
        )
    return path
