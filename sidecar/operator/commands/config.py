"""`qos-sidecar config show|set|import|export|diff`: the QoS configuration in Redis
(`validate` and `schema`, which need none, are config_offline.py's).

Every change is validated whole before it is written: an unknown key or a bad value is
refused with its name, and what Redis holds stays as it was. A document a file declares
(`serve --config-file`) is the file's: `set` and `import` refuse it, naming the file,
unless told to `--override` (until the file changes, or a sidecar given it starts);
`diff FILE` shows what applying a file would change.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sidecar.config.audit import differences
from sidecar.config.base import deep_merge, describe
from sidecar.config.files import FileRefused, read_config
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.config.store import REPAIR_HINT, ConfigInvalid, ConfigStore
from sidecar.operator.commands import config_offline
from sidecar.operator.commands.common import (
    CommandError,
    actor,
    add_by_argument,
    add_output_argument,
    add_override_argument,
    add_redis_argument,
    print_json,
    refuse_declared,
    run_with_store,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="the configuration in force, as YAML")
    show.set_defaults(run=lambda args: run_with_store(args, _show))
    change = actions.add_parser("set", help="set one key, e.g. tiers.p2.share 0.1")
    change.add_argument("key", help="dotted path, e.g. fleet.capacity_tokens_per_second")
    change.add_argument("value", help="a YAML value: 0.1, true, null, [api_key, header]")
    change.set_defaults(run=lambda args: run_with_store(args, _set))
    load = actions.add_parser(
        "import",
        help="replace the configuration from a YAML/JSON file (keys it omits take their defaults)",
    )
    load.add_argument("file", type=Path)
    load.set_defaults(run=lambda args: run_with_store(args, _import))
    dump = actions.add_parser("export", help="print the whole configuration")
    dump.add_argument("--format", choices=("yaml", "json"), default="yaml")
    dump.set_defaults(run=lambda args: run_with_store(args, _export))
    diff = actions.add_parser("diff", help="what applying a YAML/JSON file would change")
    diff.add_argument("file", type=Path)
    diff.set_defaults(run=lambda args: run_with_store(args, _diff))
    config_offline.add_actions(actions)
    for sub in (change, load):
        add_override_argument(sub, "the document")
        add_by_argument(sub)
    for sub in (show, diff):
        add_output_argument(sub)
    for sub in (show, change, load, dump, diff):
        add_redis_argument(sub)


def _document(config: QosConfig) -> dict[str, Any]:
    return config.model_dump(mode="json")


def _validated(document: Any) -> QosConfig:
    try:
        return QosConfig.from_partial(document)
    except ValidationError as error:
        raise CommandError("configuration refused:\n" + describe(error)) from None
    except ValueError as error:
        raise CommandError(f"configuration refused: {error}") from None


async def _loaded(store: ConfigStore) -> Snapshot:
    """The configuration in force; one Redis holds that does not validate is reported
    with what is wrong and how to repair it."""
    try:
        return await store.load()
    except ConfigInvalid as error:
        raise CommandError(f"{error}\n{REPAIR_HINT}") from None


async def _show(store: ConfigStore, args: argparse.Namespace) -> None:
    try:
        snapshot = await store.load()
    except ConfigInvalid as error:
        # What Redis holds, to repair: the keys named below, or edit this and import it.
        print(yaml.safe_dump(await store.stored_document(), sort_keys=False), end="")
        raise CommandError(f"{error}\n{REPAIR_HINT}") from None
    document = _document(snapshot.config)
    if args.output == "json":
        print_json(
            {"version": snapshot.version, "tenants": len(snapshot.tenants), "config": document}
        )
        return
    print(f"# version {snapshot.version}, {len(snapshot.tenants)} tenants")
    print(yaml.safe_dump(document, sort_keys=False), end="")


# Keys under these are the operator's own names (a route's path).
OPEN_MAPS = (["routes"],)


async def _set(store: ConfigStore, args: argparse.Namespace) -> None:
    await refuse_declared(store, args, "the configuration")
    # The document as stored, so that setting a key it holds wrongly repairs it.
    document = deep_merge(_document(QosConfig()), await store.stored_document())
    path = args.key.split(".")
    node: Any = document
    for depth, part in enumerate(path[:-1]):
        if not isinstance(node, dict) or part not in node:
            raise CommandError(f"{'.'.join(path[: depth + 1])}: unknown key")
        node = node[part]
    # A map keyed by the operator's names takes new keys; `null` removes one.
    open_map = path[:-1] in OPEN_MAPS
    if not isinstance(node, dict) or (path[-1] not in node and not open_map):
        raise CommandError(f"{args.key}: unknown key")
    try:
        value = yaml.safe_load(args.value)
    except yaml.YAMLError as error:
        raise CommandError(f"{args.key}: not a YAML value: {error}") from None
    if open_map and value is None:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    version = await store.save_config(_validated(document), actor=actor(args))
    print(f"{args.key} = {json.dumps(value)} (version {version})")


async def _import(store: ConfigStore, args: argparse.Namespace) -> None:
    await refuse_declared(store, args, "the configuration")
    try:
        document = yaml.safe_load(args.file.read_text())  # JSON is YAML too
    except (OSError, yaml.YAMLError) as error:
        raise CommandError(f"{args.file}: {error}") from None
    version = await store.save_config(_validated(document or {}), actor=actor(args))
    print(f"imported {args.file} (version {version})")


async def _export(store: ConfigStore, args: argparse.Namespace) -> None:
    document = _document((await _loaded(store)).config)
    if args.format == "json":
        json.dump(document, sys.stdout, indent=2)
        print()
    else:
        print(yaml.safe_dump(document, sort_keys=False), end="")


async def _diff(store: ConfigStore, args: argparse.Namespace) -> None:
    try:
        wanted = _document(read_config(args.file).declared)
    except FileRefused as error:
        raise CommandError(str(error)) from None
    held = _document((await _loaded(store)).config)
    found = differences(held, wanted)
    if args.output == "json":
        print_json([dataclasses.asdict(change) for change in found])
        return
    changes = [change.describe() for change in found]
    print("\n".join(changes) if changes else f"{args.file} is what Redis holds")
