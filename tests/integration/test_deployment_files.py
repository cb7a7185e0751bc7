"""The deployment files: Kubernetes, Istio, Grafana — parsed, checked, and every Envoy
configuration in them validated by the real Envoy binary."""

from __future__ import annotations

import copy
import json
import re
import urllib.request
from pathlib import Path

import pytest
import yaml

from sidecar.loops.scrape.targets import parse_targets
from sidecar.tooling.stack import envoy_config
from tests.integration.helpers import built, named
from tests.integration.test_envoy_configs import validate

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_kubernetes_manifests_hold_together():
    kustomization = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    kinds = {}
    for name in kustomization["resources"]:
        for doc in documents(DEPLOY / "kubernetes" / name):
            assert doc["apiVersion"] and doc["metadata"]["name"]
            kinds.setdefault(doc["kind"], []).append(doc)
    assert {d["metadata"]["name"] for d in kinds["Deployment"]} == {"qos-gateway", "vllm"}
    assert [d["metadata"]["name"] for d in kinds["StatefulSet"]] == ["redis"]
    services = {d["metadata"]["name"] for d in kinds["Service"]}
    assert services == {"redis", "qos-gateway", "qos-sidecar", "vllm"}
    for deployment in kinds["Deployment"]:
        spec = deployment["spec"]
        assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    gateway = next(d for d in kinds["Deployment"] if d["metadata"]["name"] == "qos-gateway")
    containers = {c["name"]: c for c in gateway["spec"]["template"]["spec"]["containers"]}
    assert containers["sidecar"]["args"][0] == "serve"
    assert {"envoy", "sidecar"} == set(containers)
    vllm = next(d for d in kinds["Deployment"] if d["metadata"]["name"] == "vllm")
    reporter = next(
        c for c in vllm["spec"]["template"]["spec"]["containers"] if c["name"] == "reporter"
    )
    assert reporter["args"][0] == "report" and "qos-sidecar:50051" in reporter["args"]
    headless = next(d for d in kinds["Service"] if d["metadata"]["name"] == "vllm")
    assert headless["spec"]["clusterIP"] == "None"
    generated = kustomization["configMapGenerator"][0]
    assert (DEPLOY / "kubernetes" / generated["files"][0]).is_file()


def patched(document: dict, operations: list[dict]) -> dict:
    """`document` after the JSON-patch operations kustomize would apply (test, add with
    "-", remove: the ones the scrape variant uses)."""
    document = copy.deepcopy(document)
    for operation in operations:
        *parents, last = operation["path"].strip("/").split("/")
        node = document
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key = last if isinstance(node, dict) else (len(node) if last == "-" else int(last))
        if operation["op"] == "test":
            assert node[key] == operation["value"], operation
        elif operation["op"] == "add" and isinstance(node, list):
            node.insert(key, operation["value"])
        elif operation["op"] == "add":
            node[key] = operation["value"]
        elif operation["op"] == "remove":
            del node[key]
    return document


def test_the_scrape_variant_drops_the_reporters_and_scrapes_the_headless_service():
    variant = yaml.safe_load((DEPLOY / "kubernetes" / "scrape" / "kustomization.yaml").read_text())
    assert variant["resources"] == [".."]
    base = {
        doc["metadata"]["name"]: doc
        for doc in documents(DEPLOY / "kubernetes" / "gateway.yaml")
        + documents(DEPLOY / "kubernetes" / "vllm.yaml")
        if doc["kind"] == "Deployment"
    }
    result = {}
    for patch in variant["patches"]:
        name = patch["target"]["name"]
        result[name] = patched(base[name], yaml.safe_load(patch["patch"]))
    pods = result["vllm"]["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in pods] == ["vllm"]
    sidecar = next(
        c for c in result["qos-gateway"]["spec"]["template"]["spec"]["containers"]
        if c["name"] == "sidecar"
    )  # fmt: skip
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    (target,) = parse_targets(env["QOS_SCRAPE_TARGETS"])
    namespace = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    assert target.dns and target.host == f"vllm.{namespace['namespace']}.svc.cluster.local"
    headless = next(
        d for d in documents(DEPLOY / "kubernetes" / "vllm.yaml") if d["kind"] == "Service"
    )
    assert target.port == headless["spec"]["ports"][0]["port"]


def test_kubernetes_envoy_config_validates_and_matches_the_local_one():
    path = DEPLOY / "kubernetes" / "envoy.yaml"
    result = validate(path)
    assert result.returncode == 0, result.stdout + result.stderr
    kube, local = envoy_config.load(path), envoy_config.load()
    assert envoy_config.as_local(kube) == envoy_config.as_local(local)


def test_istio_envoyfilter_patches_validate_in_a_real_envoy(tmp_path):
    (envoy_filter,) = documents(DEPLOY / "istio" / "envoyfilter.yaml")
    assert envoy_filter["kind"] == "EnvoyFilter"
    patches = envoy_filter["spec"]["configPatches"]
    filters = [p["patch"]["value"] for p in patches if p["applyTo"] == "HTTP_FILTER"]
    (network,) = (p["patch"] for p in patches if p["applyTo"] == "NETWORK_FILTER")
    # Each is inserted before the router, so they run in the order listed.
    assert [f["name"] for f in filters] == list(envoy_config.QOS_FILTERS)
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
    (ext_proc,) = (f for f in filters if f["name"] == "envoy.filters.http.ext_proc")
    name = ext_proc["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"]
    mesh_cluster["name"] = mesh_cluster["load_assignment"]["cluster_name"] = name
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


def test_the_reporters_and_the_sidecars_present_and_ask_the_same_report_token():
    documents = built()
    gateway, vllm = (
        named(documents, "Deployment", "qos-gateway"),
        named(documents, "Deployment", "vllm"),
    )

    def token_of(deployment: dict, container: str) -> dict:
        containers = deployment["spec"]["template"]["spec"]["containers"]
        (found,) = [c for c in containers if c["name"] == container]
        (token,) = [e for e in found["env"] if e["name"] == "QOS_REPORT_TOKEN"]
        return token["valueFrom"]["secretKeyRef"]

    assert (
        token_of(gateway, "sidecar")
        == token_of(vllm, "reporter")
        == {
            "name": "qos-report",
            "key": "token",
        }
    )
