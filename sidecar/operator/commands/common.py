"""What the operator commands share: the Redis they talk to, and how they fail."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as redis

from sidecar import redis_connect
from sidecar.config import recovery
from sidecar.config.audit import Actor, clean_name, who
from sidecar.config.store import ConfigStore, StoreLost
from sidecar.options import env_bool
from sidecar.request.queueing.peers import PEERS_KEY
from sidecar.settings import DEFAULT_REDIS_URL


class CommandError(Exception):
    """A refusal to show the operator: printed without a traceback, exit code 2."""


# How long a command waits for the sidecars to put back a configuration Redis lost, and
# how long for a sidecar to show itself at all before an empty Redis counts as new.
PUT_BACK_WAIT_SECONDS = 10.0
SIDECARS_SEEN_WITHIN_SECONDS = 1.0


def add_redis_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL", DEFAULT_REDIS_URL),
        help="Redis holding the configuration [env REDIS_URL] (default: %(default)s)",
    )
    parser.add_argument(
        "--redis-cluster",
        action=argparse.BooleanOptionalAction,
        default=env_bool("QOS_REDIS_CLUSTER", os.environ.get("QOS_REDIS_CLUSTER", "")),
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
            await configuration_in_place(client)
            await action(ConfigStore(client), args)
        except StoreLost as error:
            message = f"{error}; the sidecars are putting it back: run this again"
            raise CommandError(message) from None
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


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """--output json: what the command reads as one JSON document, for scripts."""
    parser.add_argument(
        "--output", choices=("text", "json"), default="text", help="text (default) or json"
    )


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def add_by_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--by",
        default=os.environ.get("QOS_OPERATOR") or who(),
        help="who makes the change, as the record keeps it [env QOS_OPERATOR] "
        "(default: %(default)s)",
    )


def actor(args: argparse.Namespace) -> Actor:
    """Who makes a change from the command line, for the record."""
    return Actor(clean_name(args.by) or who(), "cli")


def add_override_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--override", action="store_true", help=f"write even where a file declares {what}"
    )


async def refuse_declared(
    store: ConfigStore, args: argparse.Namespace, what: str, tenant: str | None = None
) -> None:
    """Refuse to change what a file declares (the file's sidecars apply it again as it
    changes, and as they start), unless told to --override."""
    path = await store.declared_by(tenant)
    if path is not None and not getattr(args, "override", False):
        raise CommandError(
            f"{what} comes from the file {path}: change it there (every sidecar given the "
            "file applies it within a second), or --override to write anyway (until the "
            "file changes, or a sidecar given it starts)"
        )


async def configuration_in_place(client: redis.Redis) -> None:
    """Wait while the sidecars put back a configuration Redis lost (restarted empty), or
    parts of one lost or changed behind its version (a key deleted by hand, evicted), so
    a command neither reads defaults as the operators' choice nor makes an empty store a
    new one under them. An empty Redis with no sidecar about is a new one: the command's
    write makes it; a store missing parts with no sidecar about is said, then used."""
    started = time.monotonic()
    told = False
    while (missing := await _missing(client)) is not None:
        waited = time.monotonic() - started
        sidecars_about = bool(await client.exists(PEERS_KEY))
        if waited > SIDECARS_SEEN_WITHIN_SECONDS and not sidecars_about:
            if missing != _NOTHING:
                warning = f"warning: {missing}, and no sidecar is about to put it back"
                print(warning, file=sys.stderr)
            return
        if waited > PUT_BACK_WAIT_SECONDS:
            raise CommandError(
                f"{missing}, and no sidecar put it back within "
                f"{PUT_BACK_WAIT_SECONDS:.0f} s; look at the sidecars' logs"
            )
        if sidecars_about and not told:
            print(f"{missing}: waiting for the sidecars to put theirs back", file=sys.stderr)
            told = True
        await asyncio.sleep(0.2)


_NOTHING = "Redis holds no configuration"


async def _missing(client: redis.Redis) -> str | None:
    """What the store lacks, or None when it is whole."""
    if not _in_place(await recovery.read_state(client)):
        return _NOTHING
    found = await recovery.check(client)
    if found is not None and found.partial:
        return "parts of the configuration in Redis are lost or changed behind its version"
    return None


def _in_place(state: recovery.StoreState) -> bool:
    return bool(state.identity) and state.has_document
