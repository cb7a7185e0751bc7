"""Every Envoy config we ship is accepted by the real Envoy binary."""

from __future__ import annotations

import re
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from sidecar.ports import free_port
from sidecar.routes.table import BUILT_IN, CLIENT_READS, OPERATIONAL
from sidecar.tooling.stack import envoy_config
from sidecar.tooling.stack.certificates import make_local_pki
from sidecar.tooling.stack.stack import start_envoy
from tests.integration.helpers import kubernetes_envoy_here

pytestmark = pytest.mark.integration

FULL_CONFIGS = sorted(
    p for p in envoy_config.ENVOY_DIR.glob("*.yaml") if not p.name.endswith(".snippet.yaml")
)


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    """Envoy's verdict on `path`; its mode layer reads an empty state directory where the
    one it names (the shipped /var/lib/qos-sidecar) is not on this machine: Envoy
    refuses a config whose directory is missing."""
    config = envoy_config.load(path)
    with tempfile.TemporaryDirectory() as state:
        if not envoy_config.state_dir_of(config).is_dir():
            path = envoy_config.write(
                envoy_config.with_state_dir(config, Path(state)), Path(state) / path.name
            )
        return subprocess.run(
            [
                envoy_config.envoy_binary(),
                "--mode",
                "validate",
                "-c",
                str(path),
                "--disable-hot-restart",
                "--log-level",
                "error",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )


# What makes the path Envoy forwards the one the sidecar decides on.
PATH_OPTIONS = {
    "normalize_path": True,
    "merge_slashes": True,
    "path_with_escaped_slashes_action": "REJECT_REQUEST",
}
SHIPPED_MANAGERS = [
    *FULL_CONFIGS,
    envoy_config.ENVOY_DIR.parent / "deploy" / "kubernetes" / "base" / "envoy.yaml",
]


@pytest.mark.parametrize("path", SHIPPED_MANAGERS, ids=lambda p: p.name)
def test_every_shipped_envoy_normalises_the_path_it_forwards(path):
    manager = envoy_config.connection_manager(yaml.safe_load(path.read_text()))
    assert {key: manager.get(key) for key in PATH_OPTIONS} == PATH_OPTIONS


def test_the_snippet_and_istio_normalise_the_path_too():
    snippet = yaml.safe_load((envoy_config.ENVOY_DIR / "ext_proc_filter.snippet.yaml").read_text())
    assert snippet["connection_manager_options"] == PATH_OPTIONS
    istio = envoy_config.ENVOY_DIR.parent / "deploy" / "istio" / "filters" / "envoyfilter.yaml"
    patches = yaml.safe_load(istio.read_text())["spec"]["configPatches"]
    (manager,) = [p for p in patches if p["applyTo"] == "NETWORK_FILTER"]
    options = manager["patch"]["value"]["typed_config"]
    assert {key: options.get(key) for key in PATH_OPTIONS} == PATH_OPTIONS


def operational_regex(routes: list[dict]) -> str:
    (route,) = [r for r in routes if "safe_regex" in r["match"]]
    assert route["direct_response"]["status"] == 404
    return route["match"]["safe_regex"]["regex"]


@pytest.mark.parametrize("path", SHIPPED_MANAGERS, ids=lambda p: p.name)
def test_every_shipped_envoy_refuses_the_engines_controls_itself(path):
    """Even with the sidecar down (failure_mode_allow), the operational routes answer 404:
    the route's regex matches exactly the sidecar's list, before any other route."""
    (host,) = envoy_config.connection_manager(yaml.safe_load(path.read_text()))["route_config"][
        "virtual_hosts"
    ]
    regex = re.compile(operational_regex(host["routes"][:1]))
    for route in OPERATIONAL:
        assert regex.match(route) and regex.match(f"{route}/"), route
    for route in BUILT_IN:
        assert not regex.match(route), route
    snippet = yaml.safe_load((envoy_config.ENVOY_DIR / "ext_proc_filter.snippet.yaml").read_text())
    assert operational_regex([snippet["operational_route"]]) == regex.pattern


def test_there_are_configs_to_validate():
    names = {p.name for p in FULL_CONFIGS}
    assert {"envoy.yaml", "compose.yaml"} <= names


@pytest.mark.parametrize("path", FULL_CONFIGS, ids=lambda p: p.name)
def test_shipped_config_validates(path):
    result = validate(path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


def test_drop_in_filter_snippet_validates_inside_a_plain_envoy(tmp_path):
    """The snippet's filter and cluster, put into an Envoy that had no QoS, validate."""
    snippet = yaml.safe_load((envoy_config.ENVOY_DIR / "ext_proc_filter.snippet.yaml").read_text())
    config = envoy_config.load()
    resources = config["static_resources"]
    manager = envoy_config.connection_manager(config)
    manager["http_filters"] = [
        snippet["engine_headers_filter"],
        snippet["http_filter"],
        *(f for f in manager["http_filters"] if f["name"] not in envoy_config.QOS_FILTERS),
    ]
    resources["clusters"] = [c for c in resources["clusters"] if c["name"] != "qos_sidecar"]
    for option in PATH_OPTIONS:
        manager.pop(option)
    manager.update(snippet["connection_manager_options"])
    manager["access_log"] = [snippet["access_log"]]
    (host,) = manager["route_config"]["virtual_hosts"]
    others = [r for r in host["routes"] if "safe_regex" not in r["match"]]
    host["routes"] = [snippet["operational_route"], *others]
    resources["clusters"].append(snippet["cluster"])
    result = validate(envoy_config.write(config, tmp_path / "with-snippet.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_config_is_refused(tmp_path):
    """The check above can fail: Envoy rejects a config with a bad field."""
    config = envoy_config.load()
    config["static_resources"]["clusters"][0]["connect_timeout"] = "soon"
    result = validate(envoy_config.write(config, tmp_path / "broken.yaml"))
    assert result.returncode != 0


def test_drop_in_pool_route_validates_before_a_plain_route(tmp_path):
    """The snippet's route for model pools, put before an Envoy's own route, validates."""
    snippet = yaml.safe_load((envoy_config.ENVOY_DIR / "ext_proc_filter.snippet.yaml").read_text())
    config = envoy_config.load()
    (host,) = envoy_config.connection_manager(config)["route_config"]["virtual_hosts"]
    host["routes"] = [snippet["pool_route"], host["routes"][-1]]
    assert host["routes"][0]["route"]["cluster_header"] == "x-qos-pool"
    result = validate(envoy_config.write(config, tmp_path / "with-pool-route.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


def api_regex(routes: list[dict]) -> str:
    (route,) = [r for r in routes if "safe_regex" in r["match"] and "route" in r]
    return route["match"]["safe_regex"]["regex"]


@pytest.mark.parametrize("path", SHIPPED_MANAGERS, ids=lambda p: p.name)
def test_every_shipped_envoy_fails_open_on_the_apis_routes_alone(path):
    """Without the sidecar only the APIs' routes (the sidecar's table, exactly) are sent on;
    the last route takes every other path and fails closed."""
    (host,) = envoy_config.connection_manager(yaml.safe_load(path.read_text()))["route_config"][
        "virtual_hosts"
    ]
    regex = re.compile(api_regex(host["routes"]))
    for route in (*BUILT_IN, *CLIENT_READS):
        spelled = route.replace("*", "an-id")
        assert regex.match(spelled) and regex.match(f"{spelled}/"), route
    for route in (*OPERATIONAL, "/metricsX", "/metrics/x", "/tokenizer_info", "/ready", "/x"):
        assert not regex.match(route), route
    last = host["routes"][-1]
    assert last["match"] == {"prefix": "/"}
    overrides = last["typed_per_filter_config"]["envoy.filters.http.ext_proc"]["config"]
    assert overrides["overrides"] == {"failure_mode_allow": False}
    snippet = yaml.safe_load((envoy_config.ENVOY_DIR / "ext_proc_filter.snippet.yaml").read_text())
    assert snippet["api_route_match"]["safe_regex"]["regex"] == regex.pattern
    assert snippet["undecided_route"]["typed_per_filter_config"] == last["typed_per_filter_config"]


def test_drop_in_deny_by_default_routes_validate(tmp_path):
    """The snippet's API match and its last route, as an Envoy's routes, validate."""
    snippet = yaml.safe_load((envoy_config.ENVOY_DIR / "ext_proc_filter.snippet.yaml").read_text())
    config = envoy_config.load()
    (host,) = envoy_config.connection_manager(config)["route_config"]["virtual_hosts"]
    api = {"match": snippet["api_route_match"], "route": {"cluster": "vllm", "timeout": "0s"}}
    host["routes"] = [api, snippet["undecided_route"]]
    result = validate(envoy_config.write(config, tmp_path / "with-deny-by-default.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", SHIPPED_MANAGERS, ids=lambda p: p.name)
def test_every_shipped_envoy_keeps_its_admin_api_on_loopback(path):
    config = yaml.safe_load(path.read_text())
    assert config["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    listeners = {item["name"] for item in config["static_resources"]["listeners"]}
    assert listeners == {"llm_ingress", envoy_config.STATS_LISTENER}


def test_the_stats_listener_serves_stats_and_readiness_and_nothing_else(tmp_path):
    listen, admin, stats = free_port(), free_port(), free_port()
    kubernetes = kubernetes_envoy_here(tmp_path, make_local_pki(tmp_path / "pki"))
    config = envoy_config.adapt(
        envoy_config.load(kubernetes),
        listen=("127.0.0.1", listen),
        admin_port=admin,
        stats_port=stats,
        sidecar=("127.0.0.1", free_port()),
        upstreams=[("127.0.0.1", free_port())],
    )
    envoy = start_envoy(config, tmp_path, admin, "envoy-stats", 1)
    try:

        def ask(method: str, path: str) -> tuple[int, str]:
            request = urllib.request.Request(f"http://127.0.0.1:{stats}{path}", method=method)
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                return error.code, ""

        status, text = ask("GET", "/stats/prometheus")
        assert status == 200 and "envoy_server_live" in text
        assert ask("GET", "/ready") == (200, "LIVE\n")
        for method, path in [
            ("POST", "/quitquitquit"),
            ("POST", "/runtime_modify?qos.core_only=0"),
            ("POST", "/drain_listeners"),
            ("GET", "/config_dump"),
            ("POST", "/stats/prometheus"),
            ("GET", "/stats/prometheus/../../quitquitquit"),
        ]:
            assert ask(method, path)[0] == 404, (method, path)
        assert envoy.running()  # none of them reached the admin API
    finally:
        envoy.stop()
