"""The headers the sidecar sets on an admitted request, for Envoy and the engines: Envoy
routes on the pool's, copies the overflow's into the answer and logs the others back to
the sidecar when the exchange ends. A client may send none of them.

The slot is no header: whoever names a slot in an access-log entry gives it back and
settles its charge, so it goes where neither clients nor engines read or write it, the
exchange's dynamic metadata (namespace EXCHANGE_NAMESPACE, which Envoy's ext_proc filter
takes from the sidecar alone and its access log carries back)."""

from __future__ import annotations

INTERNAL_PREFIX = "x-qos-"
TIER_HEADER = "x-qos-tier"
TENANT_HEADER = "x-qos-tenant"
EXCHANGE_NAMESPACE = "qos.exchange"
# The slot an admission holds, given back when the access log names it (in metadata).
SLOT_KEY = "slot"
# What Envoy's Lua filter does with a stream's usage (policy/stream_usage.py), in the
# same metadata: engines never see it.
USAGE_KEY = "usage"
# What Envoy tells the sidecar of itself, in the metadata its ext_proc filter forwards
# (metadata_options.forwarding_namespaces): its Lua filter reads and edits streamed
# usage (set by that filter on every request; no client can).
GATEWAY_NAMESPACE = "qos.gateway"
READS_USAGE_KEY = "reads_usage"
# The header earlier versions sent it in: stripped from clients' requests still.
SLOT_HEADER = "x-qos-slot"
QUEUE_WAIT_HEADER = "x-qos-queue-wait-ms"
# Envoy routes on it to the cluster named after the pool (route cluster_header); set by
# the sidecar only, for every pool but the default one, whose cluster is Envoy's fallback.
POOL_HEADER = "x-qos-pool"
# What the sidecar asks Envoy to log of each request (additional_request_headers_to_log).
LOGGED_HEADERS = (TIER_HEADER, TENANT_HEADER, QUEUE_WAIT_HEADER)
