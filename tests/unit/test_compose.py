"""docker-compose.yml names the services the stack needs and files that exist."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_compose_services_profiles_and_mounts():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"redis", "envoy", "sidecar", "mock-vllm", "vllm"} <= set(services)
    assert services["vllm"]["profiles"] == ["gpu"]
    assert all("profiles" not in services[name] for name in ("redis", "envoy", "sidecar"))
    for volume in services["envoy"]["volumes"]:
        source = volume.split(":")[0]
        assert source in compose["volumes"] or (REPO / source).is_file(), source
    # Envoy reads the mode from the sidecar's state directory (its image's QOS_STATE_DIR).
    state = "qos-state:/var/lib/qos-sidecar"
    assert f"{state}:ro" in services["envoy"]["volumes"]
    assert state in services["sidecar"]["volumes"] and "qos-state" in compose["volumes"]
    assert "ENV QOS_STATE_DIR=/var/lib/qos-sidecar" in (REPO / "Dockerfile").read_text()
    # Admin endpoints are published on loopback only.
    assert any(p.startswith("127.0.0.1:9902:9902") for p in services["envoy"]["ports"])
    assert "127.0.0.1:9090:9090" in services["sidecar"]["ports"]
    assert services["sidecar"]["environment"]["REDIS_URL"] == (
        "redis://:${REDIS_PASSWORD}@redis:6379/0"
    )
    # Redis as on Kubernetes: its redis.conf, its data on a named volume.
    redis = services["redis"]
    conf_source = redis["volumes"][0].split(":")[0]
    assert conf_source == "./deploy/kubernetes/base/redis.conf" and (REPO / conf_source).is_file()
    assert "redis-data:/data" in redis["volumes"] and "redis-data" in compose["volumes"]
    assert "$$REDIS_PASSWORD" in redis["command"][0]  # the container's, not compose's


def test_envoy_and_the_sidecar_share_the_envoy_token():
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    for name in ("sidecar", "envoy"):
        token = services[name]["environment"]["QOS_ENVOY_TOKEN"]
        assert token.startswith("${QOS_ENVOY_TOKEN:?"), name
    # It listens beyond loopback, on the host's own container network: plaintext, said.
    assert "0.0.0.0" in services["sidecar"]["command"]
    assert services["sidecar"]["environment"]["QOS_GRPC_PLAINTEXT"] == "true"


def test_every_reporter_and_the_sidecar_share_the_report_token():
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    for name in ("sidecar", "mock-vllm", "vllm-reporter"):
        token = services[name]["environment"]["QOS_REPORT_TOKEN"]
        assert token.startswith("${QOS_REPORT_TOKEN:?"), name
