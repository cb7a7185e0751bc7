"""One way to open the Redis the sidecar and its commands talk to: a single server or a
Redis Cluster.

Every key the sidecar uses carries a hash tag (`{qos-config}`, `{qos-pods}`, `{qos-slo}`,
`{bucket-<tier>}`), so each script and transaction touches one slot and runs unchanged on
a cluster. A cluster is reached from any of its nodes; the client learns the rest.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster


def connect(url: str, cluster: bool = False, **options: Any) -> redis.Redis:
    """A client for `url`; with `cluster`, one that follows the cluster's slots."""
    if cluster:
        # Same interface for everything the sidecar calls; typed as Redis for its users.
        return RedisCluster.from_url(url, **options)  # type: ignore[return-value]
    return redis.Redis.from_url(url, **options)
