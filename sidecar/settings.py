"""The sidecar's settings: one object, filled from flags and environment."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.grpc_tls import TlsFiles
from sidecar.options import secret, setting

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass(frozen=True)
class SidecarSettings:
    grpc_host: str = setting("127.0.0.1", "QOS_GRPC_HOST", "address the gRPC server binds")
    grpc_port: int = setting(50051, "QOS_GRPC_PORT", "ext_proc and load-report gRPC port")
    grpc_plaintext: bool = setting(
        False,
        "QOS_GRPC_PLAINTEXT",
        "serve plaintext gRPC on an address other machines reach (a private network: a "
        "single host's containers); without it, such an address needs TLS",
    )
    tls_cert_file: str = setting(
        "",
        "QOS_TLS_CERT_FILE",
        "serve TLS on the gRPC port with this certificate chain (PEM), read again when it changes",
    )
    tls_key_file: str = setting("", "QOS_TLS_KEY_FILE", "the key of --tls-cert-file (PEM)")
    tls_client_ca_file: str = setting(
        "",
        "QOS_TLS_CLIENT_CA_FILE",
        "mutual TLS: every client (Envoy, the reporters) presents a certificate from this CA (PEM)",
    )
    admin_host: str = setting("127.0.0.1", "QOS_ADMIN_HOST", "address of the admin HTTP server")
    admin_port: int = setting(9090, "QOS_ADMIN_PORT", "admin HTTP port (metrics, health)")
    redis_url: str = setting(DEFAULT_REDIS_URL, "REDIS_URL", "Redis holding budgets and config")
    redis_cluster: bool = setting(
        False, "QOS_REDIS_CLUSTER", "REDIS_URL names a node of a Redis Cluster"
    )
    config_file: str = setting(
        "",
        "QOS_CONFIG_FILE",
        "a configuration file (YAML or JSON, `config export`'s schema) applied at start and "
        "whenever it changes; the commands leave what it declares to it",
    )
    tenants_file: str = setting(
        "",
        "QOS_TENANTS_FILE",
        "a file of tenants and their API keys (or the keys' SHA-256) applied alike, for a "
        "mounted Secret",
    )
    tenants_file_max_revoked_share: float = setting(
        0.5,
        "QOS_TENANTS_FILE_MAX_REVOKED_SHARE",
        "the largest share of the tenants a tenants file declared that one change of the "
        "file may remove (more than one); a file that would remove more is refused unless "
        "it says max_revoked_share itself",
    )
    state_dir: str = setting(
        "",
        "QOS_STATE_DIR",
        "the directory this sidecar keeps its state in: the last known good configuration "
        "(served when it starts without Redis, put back into a Redis that lost it) and the "
        "mode as a runtime layer Envoy reads itself; one per gateway, shared with its Envoy "
        "(default: $XDG_STATE_HOME/qos-sidecar, or ~/.local/state/qos-sidecar)",
    )
    decider: str = setting(
        "admission", "QOS_DECIDER", "decision policy: admission, or admit-all (QoS off)"
    )
    tokenizer_file: str = setting(
        "",
        "QOS_TOKENIZER_FILE",
        "the model's tokenizer.json for exact prompt counts (its chat template is read "
        "from tokenizer_config.json or chat_template.jinja beside it)",
    )
    chat_template_file: str = setting(
        "", "QOS_CHAT_TEMPLATE_FILE", "the model's chat template, when not beside its tokenizer"
    )
    decision_log_sample: float = setting(
        0.0,
        "QOS_DECISION_LOG_SAMPLE",
        "share of decisions written to the decision log, one JSON line each (0: none, 1: all)",
    )
    drain_seconds: float = setting(
        10.0, "QOS_DRAIN_SECONDS", "on SIGTERM, how long open streams may run before being cut"
    )
    redis_timeout_ms: float = setting(
        10.0,
        "QOS_REDIS_TIMEOUT_MS",
        "longest a decision waits on Redis before budgets go local (until Redis is back)",
    )
    redis_socket_timeout_ms: float = setting(
        250.0,
        "QOS_REDIS_SOCKET_TIMEOUT_MS",
        "longest any other Redis call (load reports, samples, records, the configuration) "
        "waits for its answer; never less than --redis-timeout-ms",
    )
    over_limit_cache: bool = setting(
        True,
        "QOS_OVER_LIMIT_CACHE",
        "refuse locally, without Redis, what a bucket that just refused must refuse again",
    )
    charge_behind_ms: float = setting(
        20.0,
        "QOS_CHARGE_BEHIND_MS",
        "while a tier's bucket is known to hold more than its reserve (half its burst), "
        "admit without asking Redis and charge the bucket behind, summed, within this "
        "many ms (0: every decision asks Redis)",
    )
    shared_budget_connection: bool = setting(
        True,
        "QOS_SHARED_BUDGET_CONNECTION",
        "the decisions' budget calls share one Redis connection of their own (a single "
        "server); off: each takes one from redis-py's pool",
    )
    admin_token: str = secret(
        "QOS_ADMIN_TOKEN",
        "the token the dashboard and its API ask for (unset: they are closed to everyone)",
    )
    report_token: str = secret(
        "QOS_REPORT_TOKEN",
        "the token the load reporters present with each report (unset: pushed reports are "
        "refused; scrape mode needs none)",
    )
    envoy_token: str = secret(
        "QOS_ENVOY_TOKEN",
        "the token this gateway's Envoy presents on ext_proc, access-log and runtime streams "
        "(metadata x-qos-envoy-token, from Envoy's own QOS_ENVOY_TOKEN); unset: those "
        "services take every caller, and the gRPC port must be on loopback",
    )
    envoy_client_name: str = setting(
        "",
        "QOS_ENVOY_CLIENT_NAME",
        "a DNS name whose client certificate (verified by --tls-client-ca-file) proves a "
        "caller Envoy as the token does: for gateways that cannot add the token to their "
        "gRPC streams (Envoy Gateway's proxies); unset: the token alone",
    )
    scrape_targets: str = setting(
        "",
        "QOS_SCRAPE_TARGETS",
        "scrape mode: the model-server pods to read /metrics from, comma-separated "
        "[GROUP=]HOST:PORT or [GROUP=]dns:NAME:PORT (every A/AAAA record of NAME); one "
        "sidecar per group scrapes, by a Redis lease (empty: pods push their reports)",
    )
    scrape_interval: float = setting(
        0.2, "QOS_SCRAPE_INTERVAL", "scrape mode: seconds between two scrapes of a pod"
    )
    scrape_timeout: float = setting(
        0.15, "QOS_SCRAPE_TIMEOUT", "scrape mode: seconds a pod may take to answer"
    )
    scrape_lease_seconds: float = setting(
        0.8,
        "QOS_SCRAPE_LEASE_SECONDS",
        "scrape mode: how soon another sidecar takes over; keep it under the reports' TTL "
        "(overload.report_ttl_seconds, 1 s) so that no pod goes stale meanwhile",
    )
    scrape_resolve_seconds: float = setting(
        5.0, "QOS_SCRAPE_RESOLVE_SECONDS", "scrape mode: seconds between two DNS lookups"
    )
    scrape_dns_server: str = setting(
        "",
        "QOS_SCRAPE_DNS_SERVER",
        "scrape mode: HOST:PORT of the DNS server for dns: targets (default: the system's)",
    )
    processes: int = setting(
        1,
        "QOS_PROCESSES",
        "worker processes sharing the gRPC port (SO_REUSEPORT), for more cores; the admin "
        "port merges their metrics (label process)",
    )
    log_level: str = setting("INFO", "QOS_LOG_LEVEL", "log level")
    event_loop: str = setting(
        "asyncio",
        "QOS_EVENT_LOOP",
        "the event loop: asyncio, or uvloop (pip install 'qos-sidecar[uvloop]')",
    )

    def closed(self) -> list[str]:
        """What this sidecar keeps closed for want of a secret, to say at start."""
        closed = []
        if not self.admin_token:
            closed.append("the dashboard and its API are closed: set QOS_ADMIN_TOKEN to open them")
        if not self.report_token and not self.scrape_targets:
            closed.append(
                "pushed load reports are refused: set QOS_REPORT_TOKEN here and in the "
                "reporters (or scrape the pods: --scrape-targets)"
            )
        if not self.envoy_token:
            closed.append(
                "ext_proc, the access log and the runtime layer take every local caller: set "
                "QOS_ENVOY_TOKEN here and in Envoy's environment to take only Envoy's"
            )
        return closed

    @property
    def grpc_tls(self) -> TlsFiles | None:
        return TlsFiles.given(
            self.tls_cert_file,
            self.tls_key_file,
            self.tls_client_ca_file,
            "--tls-cert-file/--tls-key-file/--tls-client-ca-file",
        )

    @property
    def grpc_address(self) -> str:
        return f"{self.grpc_host}:{self.grpc_port}"

    @property
    def redis_socket_timeout(self) -> float:
        """Seconds a Redis socket waits for an answer: a decision's own bound must not be
        cut short by its connection's."""
        return max(self.redis_socket_timeout_ms, self.redis_timeout_ms) / 1000
