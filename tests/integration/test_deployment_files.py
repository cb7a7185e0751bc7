"""The deployment files beside the Kubernetes manifests (test_kubernetes_manifests.py):
Envoy's, Istio's, Grafana's — every Envoy configuration validated by the real Envoy
binary."""

from __future__ import annotations

import copy
import json
import re
import urllib.request
from pathlib import Path

import pytest
import yaml

from sidecar.tooling.stack import envoy_config
from sidecar.tooling.stack.certificates import make_local_pki
from tests.integration.helpers import kubernetes_envoy_here
from tests.integration.test_envoy_configs import validate

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_kubernetes_envoy_config_validates_and_matches_the_local_one(tmp_path):
    path = DEPLOY / "kubernetes" / "base" / "envoy.yaml"
    result = validate(kubernetes_envoy_here(tmp_path, make_local_pki(tmp_path / "pki")))
    assert result.returncode == 0, result.stdout + result.stderr
    kube, local = envoy_config.load(path), envoy_config.load()
    assert envoy_config.as_local(kube) == envoy_config.as_local(local)


def test_istio_envoyfilter_patches_validate_in_a_real_envoy(tmp_path):
    (envoy_filter,) = documents(DEPLOY / "istio" / "filters" / "envoyfilter.yaml")
    assert envoy_filter["kind"] == "EnvoyFilter"
    patches = envoy_filter["spec"]["configPatches"]
    filters = [p["patch"]["value"] for p in patches if p["applyTo"] == "HTTP_FILTER"]
    (network,) = (p["patch"] for p in patches if p["applyTo"] == "NETWORK_FILTER")
    # Each is inserted before the router, so they run in the order listed: our own
    # Envoy's filters, named qos.* (Istio keys its per-route settings by the well-known
    # names, an InferencePool's picker being its envoy.filters.http.ext_proc).
    assert [f["name"] for f in filters] == [
        "qos." + name.rpartition(".")[2] for name in envoy_config.QOS_FILTERS
    ]
    config = envoy_config.load()
    resources = config["static_resources"]
    manager = envoy_config.connection_manager(config)
    kept = [f for f in manager["http_filters"] if f["name"] not in envoy_config.QOS_FILTERS]
    manager["http_filters"] = filters + kept
    manager["access_log"] = network["value"]["typed_config"]["access_log"]
    # Istio names the sidecar's cluster after its Service; give the bootstrap one so named.
    mesh_cluster = copy.deepcopy(
        next(c for c in resources["clusters"] if c["name"] == "qos_sidecar")
    )
    (ext_proc,) = (f for f in filters if f["name"] == "qos.ext_proc")
    name = ext_proc["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"]
    mesh_cluster["name"] = mesh_cluster["load_assignment"]["cluster_name"] = name
    # With Envoy's token on its streams, as the CLUSTER patch merges into Istio's cluster.
    (token,) = (p["patch"] for p in patches if p["applyTo"] == "CLUSTER")
    assert token["operation"] == "MERGE"
    mesh_cluster |= token["value"]
    resources["clusters"].append(mesh_cluster)
    result = validate(envoy_config.write(config, tmp_path / "istio.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_dashboard_plots_only_metrics_the_sidecar_exposes(stack):
    dashboard = json.loads((DEPLOY / "grafana" / "qos-sidecar.json").read_text())
    with urllib.request.urlopen(f"{stack.sidecar_admin_url}/metrics", timeout=5) as response:
        families = {
            line.split()[2]
            for line in response.read().decode().splitlines()
            if line.startswith("# TYPE ")
        }
    used = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"qos_[a-z0-9_]+", target["expr"]))
    assert len(dashboard["panels"]) >= 12

    def base(name: str) -> str:
        return re.sub(r"_(total|bucket|count|sum)$", "", name)

    assert {base(n) for n in used} - {base(n) for n in families} == set()
