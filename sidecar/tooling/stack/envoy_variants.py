"""The shipped Envoy configs other than envoy/envoy.yaml, made from it: the same chain,
comments and all, with a deployment's own addresses. One definition, so a change to the
chain reaches every deployment; `python tools/gen_envoy_configs.py` writes them and a
test fails when a committed file is not what this makes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sidecar.tooling.stack.envoy_config import ENVOY_DIR, LOCAL_CONFIG

REPO = ENVOY_DIR.parent
_STATS = "socket_address: {address: 127.0.0.1, port_value: 9902}"
_LISTENER = (
    "socket_address: {address: 127.0.0.1, port_value: 8080}  # `up --listen-host 0.0.0.0` to expose"
)
_POOLS = "(`qos-sidecar up --pools 2` adds pool-a and pool-b this way):"
_SIDECAR_CLUSTER = "  - name: qos_sidecar\n    type: STATIC"
_VLLM_CLUSTER = "  - name: vllm\n    type: STATIC"
_VLLM_ENDPOINTS = """        - endpoint:
            address:
              socket_address: {address: 127.0.0.1, port_value: 8001}
        - endpoint:
            address:
              socket_address: {address: 127.0.0.1, port_value: 8002}"""


# Kubernetes: mutual TLS to the sidecar with the pod's certificate (the Secret
# qos-grpc-tls at /etc/qos-tls, made by cert-manager), read through file-based SDS so that
# a renewed certificate is taken without a restart.
_KUBERNETES_SIDECAR_TLS = """  - name: qos_sidecar
    type: STATIC
    # Mutual TLS: the sidecar's certificate checked against the CA and for its name, the
    # pod's own presented (sds-certificate.yaml, sds-ca.yaml: the Secret's files, read
    # again when the kubelet swaps them).
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: qos-sidecar
        common_tls_context:
          alpn_protocols: [h2]
          tls_certificate_sds_secret_configs:
          - name: qos-grpc-tls
            sds_config:
              resource_api_version: V3
              path_config_source:
                path: /etc/envoy/sds-certificate.yaml
                watched_directory: {path: /etc/qos-tls}
          combined_validation_context:
            default_validation_context:
              match_typed_subject_alt_names:
              - {san_type: DNS, matcher: {exact: qos-sidecar}}
            validation_context_sds_secret_config:
              name: qos-grpc-ca
              sds_config:
                resource_api_version: V3
                path_config_source:
                  path: /etc/envoy/sds-ca.yaml
                  watched_directory: {path: /etc/qos-tls}"""


@dataclass(frozen=True)
class Variant:
    path: Path
    header: str  # the comment the file opens with, in place of envoy.yaml's
    changes: tuple[tuple[str, str], ...]  # each text of envoy.yaml, found once, and its stand-in


VARIANTS = (
    Variant(
        ENVOY_DIR / "compose.yaml",
        """# Envoy for docker-compose.yml: the same chain as envoy.yaml (made from it by
# tools/gen_envoy_configs.py), with the compose services' DNS names as addresses.
# The vllm cluster resolves both the mock (`mock-vllm`, default profile) and the real
# vLLM (`vllm`, `gpu` profile); run the gpu profile with MOCK_VLLM_REPLICAS=0 so that
# only real GPUs take traffic.
""",
        (
            (_STATS, "socket_address: {address: 0.0.0.0, port_value: 9902}"),
            (_LISTENER, "socket_address: {address: 0.0.0.0, port_value: 8080}"),
            (_SIDECAR_CLUSTER, "  - name: qos_sidecar\n    type: STRICT_DNS"),
            ("{address: 127.0.0.1, port_value: 50051}", "{address: sidecar, port_value: 50051}"),
            (_POOLS, "(e.g. a compose service vllm-shop for a pool named shop):"),
            (_VLLM_CLUSTER, "  - name: vllm\n    type: STRICT_DNS"),
            ("{address: 127.0.0.1, port_value: 8001}", "{address: mock-vllm, port_value: 8000}"),
            ("{address: 127.0.0.1, port_value: 8002}", "{address: vllm, port_value: 8000}"),
        ),
    ),
    Variant(
        REPO / "deploy" / "kubernetes" / "base" / "envoy.yaml",
        "# Envoy for the Kubernetes example (deploy/kubernetes): the same chain as "
        "envoy/envoy.yaml\n# (made from it by tools/gen_envoy_configs.py). The sidecar runs "
        "in the same pod\n# (127.0.0.1, mutual TLS); the vLLM pods are found through their "
        "headless Service.\n",
        (
            (
                _STATS,
                "socket_address: {address: 0.0.0.0, port_value: 9902}"
                "  # the readiness probe, Prometheus",
            ),
            (_LISTENER, "socket_address: {address: 0.0.0.0, port_value: 8080}"),
            (_SIDECAR_CLUSTER, _KUBERNETES_SIDECAR_TLS),
            (_POOLS, "(e.g. the headless Service vllm-shop of a pool named shop):"),
            (
                _VLLM_CLUSTER,
                "  - name: vllm\n    type: STRICT_DNS"
                "  # the headless Service resolves to every vLLM pod",
            ),
            (
                _VLLM_ENDPOINTS,
                """        - endpoint:
            address:
              # The Service's short name: resolved in the pod's own namespace.
              socket_address: {address: vllm, port_value: 8000}""",
            ),
        ),
    ),
)


def render(variant: Variant, base: str | None = None) -> str:
    lines = (LOCAL_CONFIG.read_text() if base is None else base).splitlines(keepends=True)
    while lines and lines[0].startswith("#"):  # its own header off
        lines.pop(0)
    body = "".join(lines)
    for old, new in variant.changes:
        found = body.count(old)
        if found != 1:
            raise ValueError(
                f"{variant.path.name}: {old!r} is in envoy.yaml {found} times, not once"
            )
        body = body.replace(old, new)
    return variant.header + body
