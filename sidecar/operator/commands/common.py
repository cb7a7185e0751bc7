"""What the operator commands share: the Redis they talk to, and how they fail."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as redis

from sidecar import redis_connect
from sidecar.config.store import ConfigStore
from sidecar.options import parse_bool
from sidecar.settings import DEFAULT_REDIS_URL


class CommandError(Exception):
    """A refusal to show the operator: printed without a traceback, exit code 2."""


def add_redis_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", DEFAULT_REDIS_URL),
        help="Redis holding the configuration [env REDIS_URL] (default: %(default)s)",
    )
    parser.add_argument(
        "--redis-cluster",
        action=argparse.BooleanOptionalAction,
        default=parse_bool(os.environ.get("QOS_REDIS_CLUSTER", "")),
        help="the Redis URL names a node of a Redis Cluster [env QOS_REDIS_CLUSTER]",
    )


def run_with_store(
    args: argparse.Namespace, action: Callable[[ConfigStore, argparse.Namespace], Awaitable[Any]]
) -> int:
    async def go() -> None:
        client = redis_connect.connect(
            args.redis_url, args.redis_cluster, socket_connect_timeout=2, socket_timeout=5
        )
        try:
            await action(ConfigStore(client), args)
        finally:
            await client.aclose()

    try:
        asyncio.run(go())
    except CommandError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except redis.RedisError as error:
        print(f"error: Redis at {redis_connect.redacted(args.redis_url)}: {error}", file=sys.stderr)
        return 1
    return 0
