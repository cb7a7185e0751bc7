from __future__ import annotations

from sidecar.tooling.stack import envoy_config


def test_adapt_moves_every_address_and_keeps_the_rest():
    shipped = envoy_config.load()
    adapted = envoy_config.adapt(
        shipped,
        listen=("127.0.0.1", 1111),
        admin_port=2222,
        sidecar=("127.0.0.1", 3333),
        upstreams=[("127.0.0.1", 4444), ("127.0.0.1", 5555), ("127.0.0.1", 6666)],
    )
    text = str(adapted)
    for port in (1111, 2222, 3333, 4444, 5555, 6666):
        assert f"'port_value': {port}" in text
    for port in (8080, 9901, 50051, 8001, 8002):
        assert f"'port_value': {port}" not in text
    listener = adapted["static_resources"]["listeners"][0]
    assert listener["filter_chains"] == shipped["static_resources"]["listeners"][0]["filter_chains"]
    assert shipped["admin"]["address"]["socket_address"]["port_value"] == 9901  # not mutated


def test_compose_config_is_the_local_config_with_container_addresses():
    local = envoy_config.load()
    compose = envoy_config.load(envoy_config.ENVOY_DIR / "compose.yaml")
    # The admin cluster is the container's own loopback; every other one a compose name.
    types = {c["name"]: c["type"] for c in compose["static_resources"]["clusters"]}
    assert types.pop("envoy_admin") == "STATIC" and set(types.values()) == {"STRICT_DNS"}
    assert {c["type"] for c in local["static_resources"]["clusters"]} == {"STATIC"}
    assert envoy_config.as_local(compose) == envoy_config.as_local(local)
