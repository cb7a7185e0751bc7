"""The Kubernetes manifests as `kubectl apply -k` applies them: every kustomization under
deploy/ built by the real `kubectl kustomize` and validated, strictly, against the
schemas of a current Kubernetes release; then what a platform team relies on: each
variant's wiring, the pods' hardening and sizing, the disruption budget, the autoscaler,
who may reach which port, the drain order, pinned images, the image's user and extras."""

from __future__ import annotations

import copy
import math
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from sidecar.config.schema import QosConfig, TierConfig
from sidecar.loops.scrape.targets import parse_targets
from sidecar.request.policy.scheduling import CLIENT_MAY_NOT_SEND
from sidecar.tooling.stack import envoy_config
from tests.integration import crd_schemas, pod_security
from tests.integration.helpers import KUSTOMIZATION, built, named

pytestmark = pytest.mark.integration

REPO = KUSTOMIZATION.parents[1]
KUBERNETES = "1.37.0"
PUSH, SCRAPE, BASE = KUSTOMIZATION, KUSTOMIZATION / "scrape", KUSTOMIZATION / "base"
MONITORING = KUSTOMIZATION / "monitoring"
EXTENSION = KUSTOMIZATION / "inference-extension"
ISTIO = REPO / "deploy" / "istio"
EXTENSION_ISTIO = EXTENSION / "istio"
# Parts the variants share, not applied on their own (each variant builds them).
PARTS = (EXTENSION / "common", ISTIO / "filters")
NAMESPACE = KUSTOMIZATION / "namespace"
# Our own containers (the engine's image is vLLM's, as its users run it).
OURS = {"envoy", "sidecar", "reporter", "redis"}
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def kustomizations() -> list[Path]:
    """Every kustomization and component under deploy/ a user applies or adds (not the
    parts the variants share)."""
    found = (path.parent for path in (REPO / "deploy").rglob("kustomization.yaml"))
    return sorted(path for path in found if path not in PARTS)


def is_component(kustomization: Path) -> bool:
    return yaml.safe_load((kustomization / "kustomization.yaml").read_text())["kind"] == "Component"


def buildable(kustomization: Path, work: Path, variant: Path = PUSH) -> Path:
    """A kustomization as it is; a component as a user's overlay adds it to `variant`
    (paths relative: kustomize takes no absolute ones)."""
    if not is_component(kustomization):
        return kustomization
    return overlay(work, variant, components=[kustomization])


def overlay(work: Path, variant: Path, components: list[Path] = (), **fields) -> Path:
    """A user's kustomization in `work` taking `variant`, with `components` and `fields`."""
    document = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(variant, work)],
        **fields,
    }
    if components:
        document["components"] = [os.path.relpath(c, work) for c in components]
    (work / "kustomization.yaml").write_text(yaml.safe_dump(document))
    return work


def containers(documents: list[dict]) -> dict[str, dict]:
    found = {}
    for document in documents:
        if document["kind"] in ("Deployment", "StatefulSet"):
            for container in document["spec"]["template"]["spec"]["containers"]:
                found[container["name"]] = container
    return found


def pod(documents: list[dict], kind: str, name: str) -> dict:
    return named(documents, kind, name)["spec"]["template"]["spec"]


def volumes_resolve(documents: list[dict]) -> None:
    """Every volume a pod mounts is one it has (a claim, a ConfigMap the variant makes,
    a Secret), and none it has is left unmounted."""
    for document in (d for d in documents if d["kind"] in ("Deployment", "StatefulSet")):
        spec = document["spec"]["template"]["spec"]
        mounted = {m["name"] for c in spec["containers"] for m in c.get("volumeMounts", [])}
        claims = {c["metadata"]["name"] for c in document["spec"].get("volumeClaimTemplates", [])}
        volumes = spec.get("volumes", [])
        assert {v["name"] for v in volumes} | claims == mounted, document["metadata"]["name"]
        for volume in volumes:
            if "configMap" in volume:
                named(documents, "ConfigMap", volume["configMap"]["name"])


def validates(document: dict) -> None:
    """Strictly, by Kubernetes' own schemas or, for a custom resource, by its project's
    released CRD: a field either does not know is refused."""
    if crd_schemas.is_custom(document):
        crd_schemas.validate(document)
    else:
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


@pytest.mark.parametrize("kustomization", kustomizations(), ids=lambda p: p.name)
def test_every_kustomization_builds_and_validates(kustomization, tmp_path):
    documents = built(buildable(kustomization, tmp_path))
    assert documents
    for document in documents:
        if kustomization != ISTIO:  # Istio's classic ingress gateway is in istio-system
            assert document["metadata"].get("namespace", "qos") == "qos"
        validates(document)
    volumes_resolve(documents)


VARIANTS = (PUSH, SCRAPE, EXTENSION, EXTENSION_ISTIO)
COMPONENTS = sorted((KUSTOMIZATION / "components").iterdir())


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda p: p.name)
def test_every_variant_builds_with_every_component(variant, tmp_path):
    documents = built(overlay(tmp_path, variant, components=COMPONENTS))
    for document in documents:
        validates(document)
    volumes_resolve(documents)
    # Every component did its part: the sidecars on two cores, the certificates made.
    sidecar = containers(documents)["sidecar"]
    assert {"name": "QOS_PROCESSES", "value": "2"} in sidecar["env"]
    assert {d["spec"]["secretName"] for d in documents if d["kind"] == "Certificate"} >= {
        "qos-grpc-tls"
    }


def test_the_crd_check_refuses_unknown_fields_wrong_types_and_unknown_kinds():
    objective = {
        "apiVersion": "llm-d.ai/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": {"name": "o"},
        "spec": {"priority": 1, "poolRef": {"name": "vllm"}},
    }
    crd_schemas.validate(objective)
    spoiled = {
        "unknown field": lambda o: o["spec"].update(criticality="Critical"),
        "wrong type": lambda o: o["spec"].update(priority="high"),
        "missing field": lambda o: o["spec"].pop("poolRef"),
    }
    for spoil in spoiled.values():
        document = copy.deepcopy(objective)
        spoil(document)
        with pytest.raises(jsonschema.ValidationError):
            crd_schemas.validate(document)
    legacy = dict(objective, apiVersion="inference.networking.x-k8s.io/v1alpha2")
    assert crd_schemas.is_custom(legacy)
    with pytest.raises(LookupError):
        crd_schemas.validate(legacy)


def test_the_variants_differ_only_in_how_the_load_is_learnt():
    push, scrape = built(PUSH), built(SCRAPE)
    assert [c["name"] for c in pod(push, "Deployment", "vllm")["containers"]] == [
        "vllm",
        "reporter",
    ]
    assert [c["name"] for c in pod(scrape, "Deployment", "vllm")["containers"]] == ["vllm"]
    reporter = containers(push)["reporter"]
    assert reporter["args"][0] == "report" and "qos-sidecar:50051" in reporter["args"]
    env = {e["name"]: e.get("value") for e in containers(scrape)["sidecar"]["env"]}
    (target,) = parse_targets(env["QOS_SCRAPE_TARGETS"])
    headless = named(scrape, "Service", "vllm")
    assert headless["spec"]["clusterIP"] == "None"
    # The headless Service by its short name: the pod's own namespace, whichever it is.
    assert target.dns and target.host == headless["metadata"]["name"]
    assert target.port == headless["spec"]["ports"][0]["port"]
    assert "QOS_SCRAPE_TARGETS" not in {e["name"] for e in containers(push)["sidecar"]["env"]}
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in push)
    assert kinds == sorted((d["kind"], d["metadata"]["name"]) for d in scrape)


def test_the_reporters_and_the_sidecars_present_and_ask_the_same_report_token():
    found = containers(built(PUSH))

    def token_of(container: str) -> dict:
        (token,) = [e for e in found[container]["env"] if e["name"] == "QOS_REPORT_TOKEN"]
        return token["valueFrom"]["secretKeyRef"]

    assert token_of("sidecar") == token_of("reporter") == {"name": "qos-report", "key": "token"}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda p: p.name)
def test_an_overlay_in_another_namespace_leaves_nothing_in_qos(variant, tmp_path):
    """Service names resolve in the pod's own namespace: an overlay that places the
    gateway elsewhere has every object there, and no text naming the qos namespace. (The
    Istio variant's filters name Istio's cluster for the sidecars, which carries their
    namespace: an overlay repeats the variant's replacements, as its docs say.)"""
    replacements = yaml.safe_load((variant / "kustomization.yaml").read_text()).get("replacements")
    fields = {"replacements": replacements} if replacements else {}
    documents = built(overlay(tmp_path, variant, namespace="llm-test", **fields))
    for document in documents:
        assert document["kind"] != "Namespace"  # the namespace is not the app's
        assert document["metadata"]["namespace"] == "llm-test", document["metadata"]
    text = yaml.safe_dump_all(documents)
    assert "qos.svc" not in text
    assert not re.search(r"(?<![\w])namespace: qos\b", text)


def test_envoy_presents_the_token_the_sidecar_asks_of_it_in_every_variant():
    for variant in (PUSH, SCRAPE):
        found = containers(built(variant))
        tokens = [
            [e for e in found[name]["env"] if e["name"] == "QOS_ENVOY_TOKEN"]
            for name in ("envoy", "sidecar")
        ]
        for (token,) in tokens:
            assert token["valueFrom"]["secretKeyRef"] == {"name": "qos-envoy", "key": "token"}


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job")
# The gateway's own variants and components (not the monitoring, the namespace, Istio's).
GATEWAYS = [
    k
    for k in kustomizations()
    if k.is_relative_to(KUSTOMIZATION) and k not in (MONITORING, NAMESPACE)
]


@pytest.mark.parametrize("kustomization", GATEWAYS, ids=lambda p: p.name)
def test_every_pod_passes_the_restricted_pod_security_standard(kustomization, tmp_path):
    documents = built(buildable(kustomization, tmp_path))
    namespace = named(built(NAMESPACE), "Namespace", "qos")["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "restricted"
    pods = {d["metadata"]["name"]: d for d in documents if d["kind"] in WORKLOADS}
    assert {"qos-gateway", "redis", "vllm"} <= set(pods)
    for name, workload in pods.items():
        spec = workload["spec"]["template"]["spec"]
        assert pod_security.violations(spec) == [], name
        # None of them talks to the Kubernetes API: no token to steal.
        assert spec.get("automountServiceAccountToken") is False, name
        labels = workload["spec"]["template"]["metadata"]["labels"]
        for key in ("name", "component", "part-of"):
            assert labels.get(f"app.kubernetes.io/{key}"), (name, key)


def test_the_pod_security_check_finds_what_restricted_refuses():
    hardened = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    good = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "securityContext": hardened}],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }
    assert pod_security.violations(good) == []
    breaks = {
        "hostNetwork": lambda s: s.update(hostNetwork=True),
        "hostPath": lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "no seccomp": lambda s: s["securityContext"].pop("seccompProfile"),
        "root": lambda s: s["securityContext"].pop("runAsNonRoot"),
        "escalation": lambda s: s["containers"][0]["securityContext"].pop(
            "allowPrivilegeEscalation"
        ),
        "capabilities": lambda s: s["containers"][0]["securityContext"].pop("capabilities"),
        "hostPort": lambda s: s["containers"][0].update(ports=[{"hostPort": 80}]),
        "unconfined": lambda s: s["containers"][0]["securityContext"].update(
            seccompProfile={"type": "Unconfined"}
        ),
    }
    for what, spoil in breaks.items():
        spec = copy.deepcopy(good)
        spoil(spec)
        assert pod_security.violations(spec), what


def test_redis_refuses_writes_before_its_container_limit_kills_it():
    config = dict(
        line.split(None, 1)
        for line in (BASE / "redis.conf").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert config["maxmemory-policy"] == "noeviction"
    limit = pod(built(PUSH), "StatefulSet", "redis")["containers"][0]["resources"]["limits"]
    assert config["maxmemory"].endswith("mb") and limit["memory"].endswith("Gi")
    maxmemory_mib = int(config["maxmemory"][:-2]) * 1000**2 / 1024**2
    assert maxmemory_mib <= 0.75 * float(limit["memory"][:-2]) * 1024  # room for a rewrite


def test_the_gateway_spreads_over_nodes_and_zones():
    documents = built(PUSH)
    spread = pod(documents, "Deployment", "qos-gateway")["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    for constraint in spread:
        assert constraint["labelSelector"] == {"matchLabels": {"app": "qos-gateway"}}


def test_the_sidecar_is_probed_for_what_it_is():
    sidecar = containers(built(PUSH))["sidecar"]
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert sidecar["startupProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"] for p in sidecar["ports"]}
    assert "admin" in ports


def test_every_grpc_client_and_the_sidecar_take_their_tls_files_from_a_mounted_secret():
    documents = built(PUSH)
    found = containers(documents)
    volumes = {
        v["name"]: v["secret"]["secretName"]
        for d in documents
        if d["kind"] in ("Deployment", "StatefulSet")
        for v in d["spec"]["template"]["spec"].get("volumes", [])
        if "secret" in v
    }

    def secret_of(container: str, path: str) -> str:
        mounts = found[container]["volumeMounts"]
        (mount,) = [m for m in mounts if path.startswith(m["mountPath"] + "/")]
        return volumes[mount["name"]]

    sidecar = {e["name"]: e.get("value") for e in found["sidecar"]["env"]}
    for name in ("QOS_TLS_CERT_FILE", "QOS_TLS_KEY_FILE", "QOS_TLS_CLIENT_CA_FILE"):
        assert secret_of("sidecar", sidecar[name]) == "qos-grpc-tls", name
    # Envoy reads the same Secret where its SDS files say.
    for name in ("sds-certificate.yaml", "sds-ca.yaml"):
        for path in re.findall(r"filename: (\S+)\}", (BASE / name).read_text()):
            assert secret_of("envoy", path) == "qos-grpc-tls", path
    reporter = {e["name"]: e.get("value") for e in found["reporter"]["env"]}
    for name in ("QOS_TLS_CA_FILE", "QOS_TLS_CERT_FILE", "QOS_TLS_KEY_FILE"):
        assert secret_of("reporter", reporter[name]) == "qos-reporter-tls", name
    # cert-manager's component makes both Secrets, the gateway's for both ends.
    certificates = cert_managers_certificates()
    assert set(certificates["qos-grpc-tls"]["usages"]) == {"server auth", "client auth"}
    assert "qos-sidecar" in certificates["qos-grpc-tls"]["dnsNames"]
    assert certificates["qos-reporter-tls"]["usages"] == ["client auth"]


def test_our_containers_are_sized_hardened_and_pinned():
    documents = built(PUSH)
    found = containers(documents)
    assert set(found) >= OURS
    for name in OURS:
        container = found[name]
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        assert requests["cpu"] and requests["memory"] and limits["memory"], name
        assert "cpu" not in limits, name  # throttled decisions wait: no CPU limits
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, name
        assert context["readOnlyRootFilesystem"] is True, name
        assert context["capabilities"] == {"drop": ["ALL"]}, name
    for container in found.values():
        image = container["image"]
        assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+[\w.-]*", image), image
    assert {found[n]["image"] for n in ("sidecar", "reporter")} == {f"qos-sidecar:{VERSION}"}
    for kind, name in (("Deployment", "qos-gateway"), ("StatefulSet", "redis")):
        assert pod(documents, kind, name)["securityContext"]["runAsNonRoot"] is True
    users = {found[n]["securityContext"].get("runAsUser") for n in ("sidecar", "reporter")}
    assert users == {10001}


def cert_managers_certificates() -> dict[str, dict]:
    """The cert-manager component's Certificates, by the Secret each makes."""
    component = yaml.safe_load_all(
        (KUSTOMIZATION / "components" / "cert-manager" / "certificates.yaml").read_text()
    )
    return {d["spec"]["secretName"]: d["spec"] for d in component if d["kind"] == "Certificate"}


def cores(quantity: str) -> float:
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


@pytest.mark.parametrize("kustomization", GATEWAYS, ids=lambda p: p.name)
def test_the_sidecars_processes_and_envoys_workers_follow_their_cpu(kustomization, tmp_path):
    # One sidecar process decides on one core: as many as the sidecar's CPU request has
    # whole cores, and as many workers in the pod's Envoy (where it has one: not behind
    # a Gateway's), whose connections spread over them.
    found = containers(built(buildable(kustomization, tmp_path)))
    sidecar = found["sidecar"]
    sidecar_cpu = cores(sidecar["resources"]["requests"]["cpu"])
    (processes,) = [int(e["value"]) for e in sidecar["env"] if e["name"] == "QOS_PROCESSES"]
    assert processes == max(1, math.floor(sidecar_cpu))
    envoy = found.get("envoy")
    assert (envoy is None) == (kustomization in (EXTENSION, EXTENSION_ISTIO))
    if envoy is not None:
        assert int(envoy["args"][envoy["args"].index("--concurrency") + 1]) == processes
        # Envoy takes about half the sidecar's CPU a request (docs/deployment.md).
        assert sidecar_cpu / 4 <= cores(envoy["resources"]["requests"]["cpu"]) <= sidecar_cpu


def test_the_image_runs_as_that_user_with_the_extras_its_flags_ask_for():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^USER 10001$", dockerfile, re.MULTILINE)
    (extras,) = re.findall(r'pip install --no-cache-dir "\.\[([\w,]+)\]"', dockerfile)
    defined = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert {"uvloop", "exact"} <= set(extras.split(",")) <= set(defined["optional-dependencies"])


def test_the_gateway_survives_drains_grows_with_its_cpu_and_leaves_in_order():
    documents = built(PUSH)
    budget = named(documents, "PodDisruptionBudget", "qos-gateway")["spec"]
    deployment = named(documents, "Deployment", "qos-gateway")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    # One pod at a time, however many the autoscaler runs.
    assert (
        budget["maxUnavailable"] == 1
        and budget["selector"]["matchLabels"].items() <= labels.items()
    )
    scaler = named(documents, "HorizontalPodAutoscaler", "qos-gateway")["spec"]
    assert scaler["scaleTargetRef"]["name"] == "qos-gateway"
    (metric,) = scaler["metrics"]
    assert metric["resource"]["name"] == "cpu" and scaler["minReplicas"] >= 2
    spec = deployment["spec"]["template"]["spec"]
    by_name = {c["name"]: c for c in spec["containers"]}
    args = by_name["sidecar"]["args"]
    drain = float(args[args.index("--drain-seconds") + 1])
    # The sidecar's hook drains Envoy (test_pod_termination.py runs it); Envoy's waits
    # for it. The grace covers the spread, the longest answer and the sidecar's drain.
    hook = by_name["sidecar"]["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[:2] == ["qos-sidecar", "drain-envoy"]
    spread = float(hook[hook.index("--propagation-seconds") + 1])
    longest = float(hook[hook.index("--longest-answer-seconds") + 1])
    assert "envoy-drained" in " ".join(by_name["envoy"]["lifecycle"]["preStop"]["exec"]["command"])
    assert spec["terminationGracePeriodSeconds"] > spread + longest + drain


def test_only_who_needs_a_port_may_reach_it():
    documents = built(PUSH)
    policies = {
        d["spec"]["podSelector"]["matchLabels"]["app"]: d["spec"]["ingress"]
        for d in documents
        if d["kind"] == "NetworkPolicy"
    }

    def sources(app: str, port: int) -> list:
        rules = [r for r in policies[app] if port in [p["port"] for p in r["ports"]]]
        return [r.get("from") for r in rules]

    assert sources("qos-gateway", 8080) == [None]  # clients, from anywhere
    assert sources("qos-gateway", 50051) == [[{"podSelector": {"matchLabels": {"app": "vllm"}}}]]
    for port in (9090, 9902):  # the sidecar's metrics, Envoy's stats
        (admin,) = sources("qos-gateway", port)
        assert admin[0]["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "monitoring"
        }
    assert sources("qos-gateway", 9901) == []  # Envoy's admin: from nowhere
    gateway_only = [[{"podSelector": {"matchLabels": {"app": "qos-gateway"}}}]]
    assert sources("redis", 6379) == gateway_only
    assert sources("vllm", 8000) == gateway_only
    services = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Service"}
    assert services["qos-admin"]["spec"]["ports"][0]["targetPort"] == "admin"


def longest_hold_allowed() -> float:
    """The longest any configuration may hold a request (tiers' max_queue_wait_seconds)."""
    (bound,) = [
        m.le for m in TierConfig.model_fields["max_queue_wait_seconds"].metadata if hasattr(m, "le")
    ]
    return bound


def test_envoy_gateways_proxies_hold_qos_as_our_own_envoy_does():
    documents = built(EXTENSION)
    (processor,) = named(documents, "EnvoyExtensionPolicy", "qos-sidecar")["spec"]["extProc"]
    # A held request is decided: the message timeout outlasts any hold.
    timeout = processor["messageTimeout"]
    assert timeout.endswith("s") and float(timeout[:-1]) >= longest_hold_allowed() + 1
    # Fails closed (core-only cannot be known without the sidecars); the slot's metadata.
    assert processor["failOpen"] is False and processor["statusOnError"] == 503
    assert processor["metadata"]["writableNamespaces"] == ["qos.exchange"]
    assert processor["processingMode"]["allowModeOverride"] is True
    # Every exchange's end reaches the sidecars, with what our own Envoy logs of it.
    proxy = named(documents, "EnvoyProxy", "qos-gateway-proxy")["spec"]
    (setting,) = proxy["telemetry"]["accessLog"]["settings"]
    (sink,) = setting["sinks"]
    base = yaml.safe_load(named(built(PUSH), "ConfigMap", "envoy-config")["data"]["envoy.yaml"])
    (ours,) = envoy_config.connection_manager(base)["access_log"]
    assert sink["als"]["backendRefs"] == processor["backendRefs"]
    assert sink["als"]["logName"] == ours["typed_config"]["common_config"]["log_name"]
    assert (
        sink["als"]["http"]["requestHeaders"]
        == ours["typed_config"]["additional_request_headers_to_log"]
    )
    # Client copies of the picker's headers and ours go before any filter reads them.
    removed = named(documents, "ClientTrafficPolicy", "qos-gateway")["spec"]["headers"]
    early = set(removed["earlyRequestHeaders"]["remove"])
    mutation = next(
        f for f in envoy_config.connection_manager(base)["http_filters"]
        if f["name"] == "envoy.filters.http.header_mutation"
    )  # fmt: skip
    ours_removed = {m["remove"] for m in mutation["typed_config"]["mutations"]["request_mutations"]}
    assert early == set(CLIENT_MAY_NOT_SEND) | ours_removed
    # The proxies prove themselves by the name their certificate carries.
    sidecar = {e["name"]: e.get("value") for e in containers(documents)["sidecar"]["env"]}
    assert proxy["backendTLS"]["clientCertificateRef"]["name"] == "qos-proxy-tls"
    certificates = cert_managers_certificates()
    assert certificates["qos-proxy-tls"]["dnsNames"] == [sidecar["QOS_ENVOY_CLIENT_NAME"]]
    # ...and check the sidecars' certificate for the name it is issued for.
    check = named(documents, "BackendTLSPolicy", "qos-sidecar")["spec"]
    assert check["targetRefs"] == [{"group": "", "kind": "Service", "name": "qos-sidecar"}]
    assert check["validation"]["hostname"] in certificates["qos-grpc-tls"]["dnsNames"]
    gateway = named(documents, "Gateway", "inference-gateway")["spec"]
    assert gateway["infrastructure"]["parametersRef"]["name"] == "qos-gateway-proxy"


EG_PROXIES = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}},
    "podSelector": {
        "matchLabels": {
            "app.kubernetes.io/component": "proxy",
            "app.kubernetes.io/managed-by": "envoy-gateway",
        }
    },
}
# Istio deploys a Gateway's proxies in its namespace, labelled with its name.
ISTIO_PROXIES = {
    "podSelector": {"matchLabels": {"gateway.networking.k8s.io/gateway-name": "inference-gateway"}}
}


@pytest.mark.parametrize(
    ("variant", "proxies"),
    [(EXTENSION, EG_PROXIES), (EXTENSION_ISTIO, ISTIO_PROXIES)],
    ids=["envoy-gateway", "istio"],
)
def test_behind_a_gateway_its_proxies_and_the_picker_reach_the_model_pods(variant, proxies):
    documents = built(variant)
    (rule,) = named(documents, "NetworkPolicy", "vllm")["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
    # The picker the pool names, under either of its chart's labels, the sidecars (they
    # read the pods' /metrics), and the gateway's proxies: nobody else.
    picker = named(documents, "InferencePool", "vllm")["spec"]["endpointPickerRef"]["name"]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"app": "qos-gateway"}}},
        {"podSelector": {"matchLabels": {"llm-d-router-standalone": picker}}},
        {"podSelector": {"matchLabels": {"llm-d-router-gateway": picker}}},
        proxies,
    ]
    # The proxies alone call the sidecars' gRPC port; clients reach the proxies.
    ingress = named(documents, "NetworkPolicy", "qos-gateway")["spec"]["ingress"]
    grpc = [r for r in ingress if {"port": 50051, "protocol": "TCP"} in r["ports"]]
    assert grpc == [{"from": [proxies], "ports": [{"port": 50051, "protocol": "TCP"}]}]
    assert not [r for r in ingress if "from" not in r]


def test_prometheus_scrapes_the_admin_service_and_promtool_passes_the_alerts(tmp_path):
    monitoring, gateway = built(MONITORING), built(PUSH)
    monitor = named(monitoring, "ServiceMonitor", "qos-sidecar")["spec"]
    selected = [
        d
        for d in gateway
        if d["kind"] == "Service"
        and monitor["selector"]["matchLabels"].items() <= d["metadata"].get("labels", {}).items()
    ]
    assert [d["metadata"]["name"] for d in selected] == ["qos-admin"]  # the alerts' job
    # The sidecar's metrics and Envoy's, each from a port the Service has.
    scraped = {(e["port"], e["path"]) for e in monitor["endpoints"]}
    assert scraped == {("admin", "/metrics"), ("envoy-stats", "/stats/prometheus")}
    ports = [p["name"] for p in selected[0]["spec"]["ports"]]
    assert {port for port, _ in scraped} <= set(ports)
    rules = named(monitoring, "PrometheusRule", "qos-sidecar")["spec"]
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    assert alerts >= {
        "QosP0SloBurn", "QosP1SloBurn", "QosP0Shed", "QosBudgetsLocal", "QosBudgetChargesLost",
        "QosConfigurationRefused", "QosNoPodReports", "QosNoSloController", "QosGrpcCallsRefused",
    }  # fmt: skip
    (tmp_path / "qos-sidecar-rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    shutil.copy(MONITORING / "rules-tests.yaml", tmp_path)
    for command in (
        ["promtool", "check", "rules", "qos-sidecar-rules.yaml"],
        ["promtool", "test", "rules", "rules-tests.yaml"],
    ):
        result = subprocess.run(
            command, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", (MONITORING / "rules-tests.yaml").read_text()))
    assert tested == alerts  # every alert has its test


def test_the_inference_extension_variant_puts_the_sidecar_before_the_picker():
    documents = built(EXTENSION)
    found = containers(documents)
    assert "envoy" not in found  # the gateway's proxies call the sidecars
    # The objectives: one per tier, in the tiers' order, named as the sidecars name them.
    config = yaml.safe_load(named(documents, "ConfigMap", "qos-config")["data"]["qos.yaml"])
    base = yaml.safe_load((BASE / "qos.yaml").read_text())
    assert {k: v for k, v in config.items() if k != "inference_extension"} == base
    extension = config["inference_extension"]
    assert QosConfig.from_partial(config).inference_extension.enabled  # the sidecars take it
    pool = named(documents, "InferencePool", "vllm")
    # llm-d's objectives, which its picker reads; none of the Extension's older group,
    # which it ignores beside them.
    assert not [d for d in documents if "x-k8s.io" in d["apiVersion"]]
    objectives = {
        d["metadata"]["name"]: d["spec"] for d in documents if d["kind"] == "InferenceObjective"
    }
    assert {d["apiVersion"] for d in documents if d["kind"] == "InferenceObjective"} == {
        "llm-d.ai/v1alpha2"
    }
    names = [extension["objectives"][tier] for tier in ("p0", "p1", "p2")]
    assert sorted(names) == sorted(objectives)
    priorities = [objectives[name]["priority"] for name in names]
    assert priorities == sorted(priorities, reverse=True) and len(set(priorities)) == 3
    assert priorities[2] < 0 <= priorities[1]  # P2 alone sheddable in llm-d's flow control
    assert {o["poolRef"]["name"] for o in objectives.values()} == {"vllm"}
    # The route goes to the pool; the sidecar is called on it with the whole body.
    route = named(documents, "HTTPRoute", "llm")
    (backend,) = route["spec"]["rules"][0]["backendRefs"]
    assert (backend["kind"], backend["name"]) == ("InferencePool", "vllm")
    policy = named(documents, "EnvoyExtensionPolicy", "qos-sidecar")["spec"]
    assert policy["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "llm"}
    ]
    (processor,) = policy["extProc"]
    assert processor["processingMode"]["request"] == {"body": "Buffered"}
    service = named(documents, "Service", "qos-sidecar")
    (target,) = processor["backendRefs"]
    assert (target["name"], target["port"]) == ("qos-sidecar", service["spec"]["ports"][0]["port"])
    # The load: the pods the pool selects, through the headless Service of its selector.
    headless = named(documents, "Service", "vllm")
    assert headless["spec"]["selector"] == pool["spec"]["selector"]["matchLabels"]
    env = {e["name"]: e.get("value") for e in found["sidecar"]["env"]}
    (scraped,) = parse_targets(env["QOS_SCRAPE_TARGETS"])
    assert scraped.port == pool["spec"]["targetPorts"][0]["number"]
    assert "qos-gateway" not in {d["metadata"]["name"] for d in documents if d["kind"] == "Service"}


def test_envoy_reads_the_mode_from_the_sidecars_state_on_a_volume_of_the_pod():
    """The sidecar's state directory (the image's QOS_STATE_DIR) is a volume of the pod,
    kept across either container's restart, that Envoy mounts read-only where its disk
    runtime layer looks."""
    documents = built(PUSH)
    spec = pod(documents, "Deployment", "qos-gateway")
    (state,) = [v for v in spec["volumes"] if v["name"] == "qos-state"]
    assert "emptyDir" in state
    by_name = {container["name"]: container for container in spec["containers"]}
    envoy, sidecar = by_name["envoy"], by_name["sidecar"]
    dockerfile = (REPO / "Dockerfile").read_text()
    home = re.search(r"ENV QOS_STATE_DIR=(\S+)", dockerfile).group(1)
    config = yaml.safe_load(named(documents, "ConfigMap", "envoy-config")["data"]["envoy.yaml"])
    layer = envoy_config.state_dir_of(config)
    assert {"name": "qos-state", "mountPath": str(layer), "readOnly": True} in envoy["volumeMounts"]
    assert {"name": "qos-state", "mountPath": home} in sidecar["volumeMounts"]
    assert str(layer) == home
