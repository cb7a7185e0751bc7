"""Every route that can reach a GPU passes the gate, however its path is spelled: through
the shipped envoy.yaml and the sidecar, in front of an upstream that routes like vLLM's
(Starlette) and records all that reaches it."""

from __future__ import annotations

import functools
import http.client
import json
import time
from collections.abc import Callable

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from sidecar.ports import free_port
from sidecar.tooling.stack.stack import start_envoy
from tests.integration.helpers import (
    recorded,
    recording_upstream,
    scrape,
    stack_with_tenants,
    to_one_upstream,
)

pytestmark = pytest.mark.integration

P2_KEY = "routes-p2"
P0_KEY = "routes-p0"
USER = {"role": "user", "content": "where is my parcel?"}
BOUNDARY = "qosb0undary"
AUDIO = (
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\nmock-llm\r\n'
    f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
    f"Content-Type: audio/wav\r\n\r\n{'x' * 3200}\r\n--{BOUNDARY}--\r\n"
).encode()
# One valid body for each route of the table that does GPU work, and its kind.
CHARGED = {
    "/v1/chat/completions": ("chat", {"model": "mock-llm", "messages": [USER]}),
    "/v1/completions": ("completions", {"model": "mock-llm", "prompt": "hi", "max_tokens": 5}),
    "/v1/chat/completions/batch": ("chat_batch", {"messages": [[USER], [USER]]}),
    "/v1/responses": ("responses", {"model": "mock-llm", "input": "hi"}),
    "/v1/messages": ("messages", {"model": "mock-llm", "messages": [USER], "max_tokens": 9}),
    "/invocations": ("chat", {"messages": [USER]}),
    "/cohere/v2/chat": ("cohere_chat", {"model": "mock-llm", "messages": [USER]}),
    "/generate": ("generate", {"inputs": "hi", "parameters": {"max_new_tokens": 4}}),
    "/generate_stream": ("generate", {"inputs": "hi"}),
    "/inference/v1/generate": ("generate", {"token_ids": [1, 2], "sampling_params": {}}),
    "/generative_scoring": ("input_only", {"query": "q", "items": ["a", "b"]}),
    "/v1/embeddings": ("input_only", {"model": "mock-llm", "input": ["a", "b"]}),
    "/v2/embed": ("input_only", {"texts": ["hello"]}),
    "/pooling": ("input_only", {"input": "hi"}),
    "/classify": ("input_only", {"input": ["good", "bad"]}),
    "/score": ("input_only", {"text_1": "a", "text_2": "b"}),
    "/v1/rerank": ("input_only", {"query": "shoes", "documents": ["red", "blue"]}),
    "/v1/audio/transcriptions": ("audio", AUDIO),
    "/v1/audio/translations": ("audio", AUDIO),
}
OPERATIONAL = ["/pause", "/sleep", "/v1/load_lora_adapter", "/collective_rpc", "/update_weights"]
# The engines' own routes under other spellings, and routes nobody lists.
ENGINES_INSIDES = [
    "/metricsX", "/metrics/x", "/metrics.json", "/metrics/", "/metrics?name=x",
    "/tokenizer_info", "/ready", "/version", "/load", "/server_info/x", "/v1/models/a/b",
    "/v1/chat/completions/x", "/V1/chat/completions", "/health_generate", "/nothing",
]  # fmt: skip
REFUSED = {"qos_unavailable", "route_not_found"}


def spellings(path: str) -> list[str]:
    """The path, and other ways of writing it that a server may route the same."""
    head, _, last = path.rpartition("/")
    encoded = f"{head}/%{ord(last[0]):02X}{last[1:]}"
    slash = f"{head}%2F{last}" if head else f"{path}%2F"
    return [path, encoded, slash, path.replace("/", "//"), f"/.{path}", f"{path}/", f"{path}?x=1"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """The stack's sidecar, and a second Envoy from the shipped config whose upstream is
    the recording Starlette server."""
    work = tmp_path_factory.mktemp("routes")
    tenants = {"routes": ("p2", P2_KEY), "routes-pay": ("p0", P0_KEY)}
    with stack_with_tenants(work, tenants, replicas=1) as stack, recording_upstream(work) as port:
        listen, admin = free_port(), free_port()
        config = to_one_upstream(stack.envoy_config(listen, admin), port)
        envoy = start_envoy(
            config, work, admin, name="envoy-routes", concurrency=1, env=stack.envoy_env
        )
        try:
            stack.config.set({"fleet": {"capacity_tokens_per_second": 10_000_000}})
            yield stack, listen, port
        finally:
            envoy.stop()


def send(port: int, method: str, path: str, body: dict | bytes | None = None, key: str = P2_KEY):
    """One request with the path exactly as written; (status, headers, body). A body given
    as bytes is sent as it is: the audio upload, or JSON already written."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {key}"}
    raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body else None
    if raw is not None:
        upload = raw.startswith(f"--{BOUNDARY}".encode())
        kind = f"multipart/form-data; boundary={BOUNDARY}" if upload else "application/json"
        headers["Content-Type"] = kind
    try:
        connection.request(method, path, raw, headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def charged(stack, route: str) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return samples.get(f'qos_admitted_cost_tokens_total{{route="{route}",tier="p2"}}', 0.0)


def once_past(read: Callable[[], float], before: float, within: float = 10.0) -> float:
    """A counter read until it passes `before` (or `within` s pass): the sidecar counts a
    decision once its answer is on its way, so the response may reach the client first."""
    deadline = time.monotonic() + within
    value = read()
    while value <= before and time.monotonic() < deadline:
        time.sleep(0.01)
        value = read()
    return value


def test_core_only_no_p2_request_to_any_gpu_route_reaches_the_server(gateway):
    stack, listen, upstream = gateway
    before = len(recorded(upstream))
    stack.config.mode("core-only")
    try:
        for path, (_kind, body) in CHARGED.items():
            for spelled in spellings(path):
                status, headers, answer = send(listen, "POST", spelled, body)
                if "%2F" in spelled:  # Envoy refuses an escaped slash itself
                    assert status == 400, (spelled, status, answer)
                else:
                    assert headers.get("x-qos-decision") == "shed_core_only", (spelled, answer)
        for path in OPERATIONAL:
            status, headers, _ = send(listen, "POST", path, {})
            assert (status, headers.get("x-qos-decision")) == (404, "route_not_found")
        assert recorded(upstream)[before:] == []
        # The record does see what passes: a GET that does no GPU work.
        assert send(listen, "GET", "/v1/models")[0] == 200
        assert [r["path"] for r in recorded(upstream)[before:]] == ["/v1/models"]
    finally:
        stack.config.mode("normal")


def test_without_the_sidecar_envoy_still_refuses_the_engines_controls(gateway, tmp_path):
    """Envoy fails open when the sidecar is unreachable; not onto the operational routes."""
    stack, _listen, upstream = gateway
    listen, admin = free_port(), free_port()
    config = stack.envoy_config(listen, admin)
    for cluster in config["static_resources"]["clusters"]:
        (endpoints,) = cluster["load_assignment"]["endpoints"]
        endpoints["lb_endpoints"] = endpoints["lb_endpoints"][:1]
        address = endpoints["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
        # Nobody listens for the sidecar; the model server is the recording one.
        address["port_value"] = free_port() if cluster["name"] == "qos_sidecar" else upstream
    envoy = start_envoy(config, tmp_path, admin, name="envoy-no-sidecar", concurrency=1)
    try:
        seen = len(recorded(upstream))
        for path in OPERATIONAL:
            for spelled in (path, f"{path}/", f"/.{path}?x=1", path.replace("/", "//")):
                status, _headers, answer = send(listen, "POST", spelled, {})
                assert status == 404, (spelled, answer)
                assert json.loads(answer)["error"]["code"] == "route_not_found"
        assert recorded(upstream)[seen:] == []
        for path in ("/metrics", "/version", "/server_info", "/is_sleeping"):
            status, _headers, answer = send(listen, "GET", path)
            assert status == 404, (path, answer)
        assert recorded(upstream)[seen:] == []
        # Deny by default: what is not an API's route is refused undecided, whatever the
        # engine serves under it (vLLM answers metrics on any path under /metrics).
        for path in ENGINES_INSIDES:
            for method in ("GET", "POST"):
                status, _headers, answer = send(listen, method, path)
                assert status in (404, 503), (method, path, answer)
                assert json.loads(answer)["error"]["code"] in REFUSED, (path, answer)
        assert recorded(upstream)[seen:] == []
        send(listen, "GET", "/v1/models")  # what fails open does reach it
        assert len(recorded(upstream)) == seen + 1
    finally:
        envoy.stop()


def test_in_normal_mode_every_spelling_is_charged_as_its_route(gateway):
    stack, listen, upstream = gateway
    for path, (kind, body) in CHARGED.items():
        for spelled in spellings(path):
            if "%2F" in spelled:
                continue
            before, seen = charged(stack, kind), len(recorded(upstream))
            _status, headers, answer = send(listen, "POST", spelled, body)
            assert headers.get("x-qos-decision") is None, (spelled, answer)  # not refused
            (reached,) = recorded(upstream)[seen:]
            assert reached["tier"] == "p2", (spelled, reached)
            assert once_past(functools.partial(charged, stack, kind), before) > before, spelled


def test_unknown_posts_are_refused_in_the_openai_shape_unless_configured(gateway):
    stack, listen, upstream = gateway
    seen = len(recorded(upstream))
    status, headers, answer = send(listen, "POST", "/v1/brand/new", {"input": "hi"})
    assert (status, headers["x-qos-decision"]) == (404, "route_not_found")
    assert json.loads(answer)["error"]["code"] == "route_not_found"
    assert recorded(upstream)[seen:] == []
    stack.config.set({"routes": {"/v1/brand/new": "input_only"}})
    try:
        before = charged(stack, "input_only")
        _status, headers, _ = send(listen, "POST", "/v1/brand/new", {"input": "hi"})
        assert "x-qos-decision" not in headers  # admitted (the server has no such route)
        assert once_past(lambda: charged(stack, "input_only"), before) > before
        assert [r["path"] for r in recorded(upstream)[seen:]] == ["/v1/brand/new"]
    finally:
        stack.config.set({"fleet": {"capacity_tokens_per_second": 10_000_000}})


def test_the_same_text_costs_about_the_same_wherever_the_template_renders_it(gateway):
    stack, listen, _upstream = gateway
    text = "the parcel left the depot at nine and reaches the customer by noon " * 60
    call = {"type": "function", "function": {"name": "track", "arguments": text}}
    use = {"type": "tool_use", "id": "t", "name": "track", "input": {"note": text}}
    chat = "/v1/chat/completions"
    bodies = {
        "content": ("chat", chat, [{"role": "user", "content": text}]),
        "tool_calls": ("chat", chat, [{"role": "assistant", "tool_calls": [call]}]),
        "tool_use": ("messages", "/v1/messages", [{"role": "assistant", "content": [use]}]),
    }
    costs = {}
    for name, (route, path, messages) in bodies.items():
        before = charged(stack, route)
        status, headers, _ = send(listen, "POST", path, {"messages": messages, "max_tokens": 5})
        assert status == 200 and "x-qos-decision" not in headers, (name, headers)
        costs[name] = once_past(functools.partial(charged, stack, route), before) - before
    for cost in costs.values():
        assert 0.95 * costs["content"] <= cost <= 1.05 * costs["content"], costs


def test_a_p0_request_with_many_answers_never_decodes_past_the_tiers_cap(gateway):
    _stack, listen, _upstream = gateway
    for asked, each in (({"n": 64, "max_tokens": 512}, 8), ({"n": 4}, 128), ({"n": 1}, 512)):
        body = {"model": "mock-llm", "messages": [USER], **asked}
        status, _headers, answer = send(listen, "POST", "/v1/chat/completions", body, P0_KEY)
        received = json.loads(answer)["received"]
        assert status == 200 and received["max_tokens"] == each, (asked, received)
        assert received.get("n", 1) * received["max_tokens"] <= 512
    too_many = {"model": "mock-llm", "messages": [USER], "n": 513}
    status, headers, answer = send(listen, "POST", "/v1/chat/completions", too_many, P0_KEY)
    assert (status, headers["x-qos-decision"]) == (400, "invalid_request")
    assert json.loads(answer)["error"]["param"] == "n"


def test_the_client_port_serves_the_api_and_none_of_the_engines_insides(gateway):
    _stack, listen, upstream = gateway
    seen = len(recorded(upstream))
    for path in ("/metrics", "/version", "/load", "/openapi.json", "/v1/brand/new"):
        status, headers, answer = send(listen, "GET", path)
        assert (status, headers.get("x-qos-decision")) == (404, "route_not_found"), path
        assert json.loads(answer)["error"]["code"] == "route_not_found"
    assert recorded(upstream)[seen:] == []
    assert send(listen, "GET", "/v1/models")[0] == 200
    _status, headers, _ = send(listen, "GET", "/health")  # this server has none: it says
    assert "x-qos-decision" not in headers
    assert [r["path"] for r in recorded(upstream)[seen:]] == ["/v1/models", "/health"]


odd_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
# Every field some reader of the table reads.
READ_FIELDS = [
    "model", "messages", "prompt", "input", "instructions", "max_tokens", "max_output_tokens",
    "max_completion_tokens", "stream", "stream_options", "system", "tools", "content",
    "previous_response_id", "inputs", "text", "input_ids", "token_ids", "parameters",
    "sampling_params", "query", "documents", "priority", "n", "best_of",
    "chat_template_kwargs",
]  # fmt: skip
DEEP = "__deep__"


def deep_json(levels: int) -> str:
    return "[" * levels + "]" * levels


bodies = st.tuples(
    st.sampled_from([p for p, (_, body) in CHARGED.items() if not isinstance(body, bytes)]),
    st.dictionaries(st.sampled_from(READ_FIELDS), odd_values | st.just(DEEP), max_size=4),
    st.sampled_from([0, 70, 100_000]),  # how deep a field nests, when it is DEEP
    st.sampled_from([0, 10_001, 200_000]),  # items in a huge array given as messages
)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(case=bodies)
def test_fuzzed_bodies_are_refused_or_charged_never_let_in_uncharged(gateway, case):
    stack, listen, upstream = gateway
    path, changes, depth, items = case
    body = {**CHARGED[path][1], **changes}
    if items:
        body["messages"] = [{"role": "user", "content": "x"}] * items
    text = json.dumps(body)
    if DEEP in text:
        text = text.replace(json.dumps(DEEP), deep_json(depth or 70))
    seen, before = len(recorded(upstream)), charged_total(stack)
    status, headers, answer = send(listen, "POST", path, text.encode("utf-8"))
    reached = recorded(upstream)[seen:]
    if "x-qos-decision" in headers or status in (400, 413):  # the gateway's own refusal
        assert reached == [], (path, status, answer[:200])
        event(f"refused {status}")
    else:
        (entry,) = reached
        assert entry["tier"] == "p2"  # decided and tagged...
        assert once_past(lambda: charged_total(stack), before) > before  # ...and charged
        event("admitted, charged")
    assert decider_errors(stack) == 0


def charged_total(stack) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return sum(v for k, v in samples.items() if k.startswith("qos_admitted_cost_tokens_total{"))


def decider_errors(stack) -> float:
    return scrape(f"{stack.sidecar_admin_url}/metrics")["qos_decider_errors_total{}"]
