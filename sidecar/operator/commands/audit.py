"""`qos-sidecar audit`: every change recorded, newest first: who made it, how, when, and
what changed, field by field (never a key).

audit                   the last 20 changes made by people and files
audit --controller      with the SLO controller's budget moves among them
audit --output json     one JSON document: a list of changes, for scripts
"""

from __future__ import annotations

import argparse

from sidecar.config.store import AUDIT_KEPT, ConfigStore
from sidecar.operator.commands.common import (
    CommandError,
    add_output_argument,
    add_redis_argument,
    print_json,
    run_with_store,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--count", type=int, default=20, help=f"changes shown, at most {AUDIT_KEPT} (default 20)"
    )
    parser.add_argument(
        "--controller",
        action="store_true",
        help="show the SLO controller's budget moves too",
    )
    add_output_argument(parser)
    add_redis_argument(parser)
    parser.set_defaults(run=lambda args: run_with_store(args, _list))


async def _list(store: ConfigStore, args: argparse.Namespace) -> None:
    if not 1 <= args.count <= AUDIT_KEPT:
        raise CommandError(f"--count: 1 to {AUDIT_KEPT}")
    entries = await store.audit(args.count, controller=args.controller)
    if args.output == "json":
        print_json([entry.to_dict() for entry in entries])
        return
    if not entries:
        print("no change recorded")
    for entry in entries:
        print(f"{entry.describe_head()}")
        for change in entry.changes:
            print(f"    {change.describe()}")
