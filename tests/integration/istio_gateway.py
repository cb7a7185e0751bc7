"""The Envoy configuration Istio 1.29 gives a Gateway-API gateway's proxies in front of
an InferencePool, with the Istio variant's EnvoyFilter applied to it
(deploy/kubernetes/inference-extension/istio), made here as istiod makes it: the
picker's ext_proc filter, named envoy.filters.http.ext_proc, placed before the router at
the listener (pilot/pkg/xds/filters/filters.go: a placeholder cluster, failing open) and
set per route (pilot/pkg/networking/core/route/route.go: the picker's cluster, the
pool's failure mode); the EnvoyFilter's patches applied as Istio applies them
(INSERT_BEFORE a named filter, in order; MERGE into the connection manager); the
DestinationRule's mutual TLS to the sidecars' cluster, which Istio names
`outbound|<port>||<host>`. The picker's route settings send it headers only (the
stand-in picker reads nothing else; Istio also streams it the bodies)."""

from __future__ import annotations

import copy
from typing import Any

from tests.integration.envoy_gateway import (
    EXT_PROC,
    MANAGER,
    ROUTER,
    Here,
    bootstrap,
    engines_by_picker,
    grpc_cluster,
)
from tests.integration.helpers import named

PICKER_FILTER = "envoy.filters.http.ext_proc"  # Istio's well-known name for it
PER_ROUTE = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"


def merged(into: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Protobuf merge, as Istio's MERGE does: messages merge, lists append, scalars
    replace."""
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merged(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] = into[key] + copy.deepcopy(value)
        else:
            into[key] = copy.deepcopy(value)
    return into


def patched(manager: dict[str, Any], envoy_filter: dict[str, Any]) -> dict[str, Any]:
    """The connection manager with the EnvoyFilter's gateway patches applied, in order."""
    manager = copy.deepcopy(manager)
    for change in envoy_filter["spec"]["configPatches"]:
        assert change["match"]["context"] == "GATEWAY"
        operation, value = change["patch"]["operation"], change["patch"]["value"]
        if change["applyTo"] == "HTTP_FILTER":
            assert operation == "INSERT_BEFORE"
            before = change["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"]
            filters = manager["http_filters"]
            at = next(i for i, f in enumerate(filters) if f["name"] == before)
            filters.insert(at, copy.deepcopy(value))
        elif change["applyTo"] == "NETWORK_FILTER":
            assert operation == "MERGE"
            merged(manager, {k: v for k, v in value["typed_config"].items() if k != "@type"})
        else:
            raise AssertionError(f"no such patch in this variant: {change['applyTo']}")
    return manager


def outbound(service: str, namespace: str, port: int) -> str:
    """Istio's name for a Service's cluster (a short host is the namespace's)."""
    return f"outbound|{port}||{service}.{namespace}.svc.cluster.local"


def _sidecars_tls(rule: dict[str, Any], here: Here) -> dict[str, Any]:
    (port,) = rule["spec"]["trafficPolicy"]["portLevelSettings"]
    tls = port["tls"]
    assert tls["mode"] == "MUTUAL"  # credentialName's certificate: here.proxy_tls
    return {
        "sni": tls["sni"],
        "common_tls_context": {
            "tls_certificates": [
                {
                    "certificate_chain": {"filename": str(here.proxy_tls.cert)},
                    "private_key": {"filename": str(here.proxy_tls.key)},
                }
            ],
            "validation_context": {
                "trusted_ca": {"filename": str(here.sidecar_ca)},
                "match_typed_subject_alt_names": [
                    {"san_type": "DNS", "matcher": {"exact": name}}
                    for name in tls["subjectAltNames"]
                ],
            },
        },
    }


def proxy_config(documents: list[dict], here: Here) -> dict[str, Any]:
    """The Gateway's proxies' Envoy configuration, for the built variant `documents`."""
    gateway = named(documents, "Gateway", "inference-gateway")
    namespace = gateway["metadata"]["namespace"]
    pool = named(documents, "InferencePool", "vllm")["spec"]
    picker = pool["endpointPickerRef"]
    picker_cluster = (
        f"outbound|{picker['port']['number']}||{picker['name']}.{namespace}.svc.cluster.local"
    )
    rule = named(documents, "DestinationRule", "qos-sidecar")
    sidecars = f"{rule['spec']['host']}.{namespace}.svc.cluster.local"
    (port,) = rule["spec"]["trafficPolicy"]["portLevelSettings"]
    sidecar_cluster = f"outbound|{port['port']['number']}||{sidecars}"
    pool_route = f"{namespace}.llm.0"
    manager = {
        "@type": MANAGER,
        "stat_prefix": "outbound_0.0.0.0_80",
        "http_filters": [
            {
                "name": PICKER_FILTER,
                "typed_config": {
                    "@type": EXT_PROC,
                    "grpc_service": {"envoy_grpc": {"cluster_name": "dummy"}, "timeout": "10s"},
                    "failure_mode_allow": True,
                    "processing_mode": {
                        "request_header_mode": "SKIP",
                        "response_header_mode": "SKIP",
                    },
                    "message_timeout": "1000s",
                    "metadata_options": {"receiving_namespaces": {"untyped": ["envoy.lb"]}},
                },
            },
            {"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER}},
        ],
        "route_config": {
            "name": "http.80",
            "virtual_hosts": [
                {
                    "name": "*:80",
                    "domains": ["*"],
                    "routes": [
                        {
                            "name": pool_route,
                            "match": {"prefix": "/"},
                            "route": {"cluster": pool_route, "timeout": "0s"},
                            "typed_per_filter_config": {
                                PICKER_FILTER: {
                                    "@type": PER_ROUTE,
                                    "overrides": {
                                        "failure_mode_allow": picker["failureMode"] == "FailOpen",
                                        "grpc_service": {
                                            "envoy_grpc": {"cluster_name": picker_cluster}
                                        },
                                        "processing_mode": {
                                            "request_header_mode": "SEND",
                                            "request_body_mode": "NONE",
                                            "response_header_mode": "SKIP",
                                            "response_body_mode": "NONE",
                                        },
                                    },
                                }
                            },
                        }
                    ],
                }
            ],
        },
    }
    manager = patched(manager, named(documents, "EnvoyFilter", "qos-sidecar"))
    clusters = [
        grpc_cluster(sidecar_cluster, here.sidecar_port, _sidecars_tls(rule, here)),
        grpc_cluster(picker_cluster, here.picker_port, None),
        engines_by_picker(pool_route),
    ]
    return bootstrap("0.0.0.0_80", here, manager, clusters)
