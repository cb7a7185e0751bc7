"""One way to open the Redis the sidecar and its commands talk to: a single server or a
Redis Cluster.

Every key the sidecar uses carries a hash tag (`{qos-config}`, `{qos-pods}`, `{qos-slo}`,
`{bucket-<tier>}`), so each script and transaction touches one slot and runs unchanged on
a cluster. A cluster is reached from any of its nodes; the client learns the rest.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster

from sidecar.redis_multiplexed import MultiplexedRedis, understands


def redacted(url: str) -> str:
    """`url` with its password masked, to print or log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(a Redis URL that does not parse)"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def connect(url: str, cluster: bool = False, **options: Any) -> redis.Redis:
    """A client for `url`; with `cluster`, one that follows the cluster's slots."""
    if cluster:
        # Same interface for everything the sidecar calls; typed as Redis for its users.
        return RedisCluster.from_url(url, **options)  # type: ignore[return-value]
    return redis.Redis.from_url(url, **options)


def budget_client(
    url: str, cluster: bool = False, timeout: float = 0.25
) -> MultiplexedRedis | None:
    """The one connection the decisions' budget calls share, for a single server whose URL
    it understands; None: they go through the general client."""
    if cluster or not understands(url):
        return None
    return MultiplexedRedis(url, timeout)
