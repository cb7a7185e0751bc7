"""The Envoy configuration Envoy Gateway v1.9 gives its proxies for the Inference
Extension variant (deploy/kubernetes/inference-extension), made here from the variant's
own resources the way its translator makes it, so that real Envoy runs what a cluster
would: the EnvoyExtensionPolicy's ext_proc filter (internal/xds/translator/extproc.go:
named by the policy, disabled on the listener, enabled on the route's by an empty
FilterConfig, a cluster named by the policy, message timeout, failure mode, status,
metadata namespaces, processing mode), the ClientTrafficPolicy's early header removals
(listener.go), the EnvoyProxy's ALS sink (accesslog.go: its cluster `accesslog_als_0_0`,
Envoy's default buffering) and client certificate, and the BackendTLSPolicy's server
check (translator.go: SNI and the SAN checked against it). The endpoint picker's filter is
the one Envoy AI Gateway's extension server adds before the router for an InferencePool
backend (internal/extensionserver/inferencepool.go), sending it headers only (the
stand-in picker reads nothing else; the real one also streams the bodies).

Only what is on this machine differs: addresses are loopback ports, and the Secrets' files
are read from disk rather than sent over SDS."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.grpc_tls import TlsFiles
from tests.integration.helpers import named

_TYPE = "type.googleapis.com/"
EXT_PROC = _TYPE + "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
UPSTREAM_TLS = _TYPE + "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
GRPC_ACCESS_LOG = _TYPE + "envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig"
EARLY_MUTATION = (
    _TYPE + "envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation"
)
MANAGER = (
    _TYPE + "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)
FILTER_CONFIG = _TYPE + "envoy.config.route.v3.FilterConfig"
ROUTER = _TYPE + "envoy.extensions.filters.http.router.v3.Router"
HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
DESTINATION_HEADER = "x-gateway-destination-endpoint"
_STATUS = {503: "ServiceUnavailable", 500: "InternalServerError", 502: "BadGateway"}


@dataclass(frozen=True)
class Here:
    """Where the cluster's parts are on this machine."""

    listen_port: int
    admin_port: int
    sidecar_port: int
    picker_port: int
    proxy_tls: TlsFiles  # the Secret the EnvoyProxy's clientCertificateRef names
    sidecar_ca: Path  # the ca.crt of the Secret the BackendTLSPolicy names


def _policy_name(policy: dict[str, Any]) -> str:
    meta = policy["metadata"]
    return f"{policy['kind'].lower()}/{meta['namespace']}/{meta['name']}"


def duration(text: str) -> str:
    """A Gateway API duration (30s, 250ms, 1m) as protobuf JSON's seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in ("ms", "s", "m", "h"):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "").isdigit():
            return f"{float(text[: -len(unit)]) * units[unit]:g}s"
    raise ValueError(text)


def grpc_cluster(name: str, port: int, tls: dict[str, Any] | None) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "10s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {
                            "endpoint": {
                                "address": {
                                    "socket_address": {"address": "127.0.0.1", "port_value": port}
                                }
                            }
                        }
                    ]
                }
            ],
        },
        "typed_extension_protocol_options": {
            HTTP_OPTIONS: {
                "@type": f"type.googleapis.com/{HTTP_OPTIONS}",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
    }
    if tls is not None:
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {
                "@type": UPSTREAM_TLS,
                **tls,
            },
        }
    return cluster


def _backend_tls(documents: list[dict], here: Here) -> dict[str, Any]:
    """The BackendTLSPolicy's check of the sidecars' certificate, and the EnvoyProxy's
    client certificate."""
    policy = named(documents, "BackendTLSPolicy", "qos-sidecar")["spec"]["validation"]
    proxy = named(documents, "EnvoyProxy", "qos-gateway-proxy")["spec"]["backendTLS"]
    assert proxy["clientCertificateRef"]["name"]  # the Secret here.proxy_tls holds
    return {
        "sni": policy["hostname"],
        "auto_sni_san_validation": True,  # no SAN listed: the SNI is the name checked
        "common_tls_context": {
            "tls_certificates": [
                {
                    "certificate_chain": {"filename": str(here.proxy_tls.cert)},
                    "private_key": {"filename": str(here.proxy_tls.key)},
                }
            ],
            "validation_context": {"trusted_ca": {"filename": str(here.sidecar_ca)}},
        },
    }


def _ext_proc(policy: dict[str, Any], cluster: str, authority: str) -> dict[str, Any]:
    (spec,) = policy["spec"]["extProc"]
    mode = spec.get("processingMode", {})
    modes = {
        "request_header_mode": "SEND" if "request" in mode else "SKIP",
        "response_header_mode": "SEND" if "response" in mode else "SKIP",
        "request_body_mode": "NONE",
        "response_body_mode": "NONE",
        "request_trailer_mode": "SKIP",
        "response_trailer_mode": "SKIP",
    }
    bodies = {"Buffered": "BUFFERED", "Streamed": "STREAMED", "BufferedPartial": "BUFFERED_PARTIAL"}
    for side in ("request", "response"):
        body = mode.get(side, {}).get("body")
        if body:
            modes[f"{side}_body_mode"] = bodies[body]
    config: dict[str, Any] = {
        "@type": EXT_PROC,
        "grpc_service": {
            "envoy_grpc": {"cluster_name": cluster, "authority": authority},
            "timeout": "10s",
        },
        "processing_mode": modes,
        "failure_mode_allow": spec.get("failOpen", False),
        "allow_mode_override": mode.get("allowModeOverride", False),
    }
    if "messageTimeout" in spec:
        config["message_timeout"] = duration(spec["messageTimeout"])
    if "statusOnError" in spec:
        config["status_on_error"] = {"code": _STATUS[spec["statusOnError"]]}
    writable = spec.get("metadata", {}).get("writableNamespaces")
    if writable:
        config["metadata_options"] = {"receiving_namespaces": {"untyped": writable}}
    return config


def _picker_filter(pool: dict[str, Any]) -> dict[str, Any]:
    name, namespace = pool["metadata"]["name"], pool["metadata"]["namespace"]
    return {
        "name": f"envoy.filters.http.ext_proc/endpointpicker/{name}_{namespace}_ext_proc",
        "typed_config": {
            "@type": EXT_PROC,
            "grpc_service": {"envoy_grpc": {"cluster_name": "endpointpicker"}},
            "processing_mode": {
                "request_header_mode": "SEND",
                "request_body_mode": "NONE",
                "request_trailer_mode": "SKIP",
                "response_header_mode": "SKIP",
                "response_body_mode": "NONE",
                "response_trailer_mode": "SKIP",
            },
            "message_timeout": "300s",
            "failure_mode_allow": False,
        },
    }


def _access_log(proxy: dict[str, Any]) -> list[dict[str, Any]]:
    logs = []
    for i, setting in enumerate(proxy["spec"]["telemetry"]["accessLog"]["settings"]):
        for j, sink in enumerate(setting["sinks"]):
            assert sink["type"] == "ALS" and sink["als"]["type"] == "HTTP"
            logs.append(
                {
                    "name": "envoy.access_loggers.http_grpc",
                    "typed_config": {
                        "@type": GRPC_ACCESS_LOG,
                        "common_config": {
                            "log_name": sink["als"]["logName"],
                            "transport_api_version": "V3",
                            "grpc_service": {
                                "envoy_grpc": {"cluster_name": f"accesslog_als_{i}_{j}"}
                            },
                        },
                        "additional_request_headers_to_log": sink["als"]["http"]["requestHeaders"],
                    },
                }
            )
    return logs


def _early_removals(documents: list[dict]) -> list[dict[str, Any]]:
    policy = named(documents, "ClientTrafficPolicy", "qos-gateway")["spec"]["headers"]
    removed = policy["earlyRequestHeaders"]["remove"]
    return [
        {
            "name": "envoy.http.early_header_mutation.header_mutation",
            "typed_config": {
                "@type": EARLY_MUTATION,
                "mutations": [{"remove": header} for header in removed],
            },
        }
    ]


def proxy_config(documents: list[dict], here: Here) -> dict[str, Any]:
    """The proxies' Envoy configuration, for the built variant `documents`."""
    gateway = named(documents, "Gateway", "inference-gateway")
    namespace = gateway["metadata"]["namespace"]
    (listener,) = gateway["spec"]["listeners"]
    listener_name = f"{namespace}/{gateway['metadata']['name']}/{listener['name']}"
    route = named(documents, "HTTPRoute", "llm")
    (rule,) = route["spec"]["rules"]
    (backend,) = rule["backendRefs"]
    pool = named(documents, "InferencePool", backend["name"])
    policy = named(documents, "EnvoyExtensionPolicy", "qos-sidecar")
    assert policy["spec"]["targetRefs"][0]["name"] == route["metadata"]["name"]
    (target,) = policy["spec"]["extProc"][0]["backendRefs"]
    ours = f"{_policy_name(policy)}/extproc/0"
    filter_name = f"envoy.filters.http.ext_proc/{ours}"
    route_prefix = f"httproute/{namespace}/{route['metadata']['name']}/rule/0"
    tls = _backend_tls(documents, here)
    manager = {
        "@type": MANAGER,
        "stat_prefix": f"http-{listener['port']}",
        "early_header_mutation_extensions": _early_removals(documents),
        "access_log": _access_log(named(documents, "EnvoyProxy", "qos-gateway-proxy")),
        "http_filters": [
            {
                "name": filter_name,
                "disabled": True,
                "typed_config": _ext_proc(
                    policy, ours, f"{target['name']}.{namespace}:{target['port']}"
                ),
            },
            _picker_filter(pool),
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": ROUTER},
            },
        ],
        "route_config": {
            "name": listener_name,
            "virtual_hosts": [
                {
                    "name": f"{listener_name}/*",
                    "domains": ["*"],
                    "routes": [
                        {
                            "name": f"{route_prefix}/match/0/*",
                            "match": {"prefix": rule["matches"][0]["path"]["value"]},
                            "route": {
                                "cluster": route_prefix,
                                "timeout": duration(rule["timeouts"]["request"]),
                            },
                            "typed_per_filter_config": {
                                filter_name: {
                                    "@type": FILTER_CONFIG,
                                    "config": {},
                                }
                            },
                        }
                    ],
                }
            ],
        },
    }
    clusters = [
        grpc_cluster(ours, here.sidecar_port, tls),
        grpc_cluster("accesslog_als_0_0", here.sidecar_port, tls),
        grpc_cluster("endpointpicker", here.picker_port, None),
        engines_by_picker(route_prefix),
    ]
    return bootstrap(listener_name, here, manager, clusters)


def engines_by_picker(name: str) -> dict[str, Any]:
    """The model servers' cluster: each request to the endpoint the picker named."""
    return {
        "name": name,
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": "10s",
        "original_dst_lb_config": {"use_http_header": True, "http_header_name": DESTINATION_HEADER},
    }


def bootstrap(
    listener_name: str, here: Here, manager: dict[str, Any], clusters: list[dict[str, Any]]
) -> dict[str, Any]:
    """A proxy with one listener (this connection manager) and these clusters."""
    return {
        "node": {"id": "gateway-proxy", "cluster": "gateway-proxy"},
        "admin": {
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": here.admin_port}}
        },
        "static_resources": {
            "listeners": [
                {
                    "name": listener_name,
                    "address": {
                        "socket_address": {"address": "127.0.0.1", "port_value": here.listen_port}
                    },
                    "default_filter_chain": {
                        "filters": [
                            {
                                "name": "envoy.filters.network.http_connection_manager",
                                "typed_config": manager,
                            }
                        ]
                    },
                }
            ],
            "clusters": clusters,
        },
    }
