"""`qos-sidecar config validate|schema`: the configuration and tenants files checked
without a Redis, for CI jobs and editors.

`validate` reads each file as a sidecar given it (`serve --config-file`,
`--tenants-file`) reads it, with the same bounds and the same refusals, and says which
it would refuse and why (exit code 2) or that every one would be taken (0). What it
cannot know offline is what a tenants file would revoke of the tenants a store holds: a
sidecar refuses a change that revokes more than its allowed share (`config diff` and
`tenants list` show the store). `schema` prints the JSON Schema of either file, for an
editor's YAML or JSON language server.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sidecar.config.files import (
    DeclaredTenants,
    FileRefused,
    TenantsFile,
    declares_tenants,
    read_config,
    read_tenants,
)
from sidecar.config.schema import QosConfig
from sidecar.operator.commands.common import add_output_argument, print_json

CONFIG, TENANTS = "config", "tenants"


@dataclass(frozen=True)
class Verdict:
    """One file's: what kind it was read as, and why it is refused ("" when taken)."""

    file: str
    kind: str
    refused: str = ""
    tenants: int | None = None  # a tenants file's count, when taken
    api_keys: int | None = None

    @property
    def taken(self) -> bool:
        return not self.refused

    def describe(self) -> str:
        if self.refused:
            return self.refused
        if self.kind == TENANTS:
            counts = f"{self.tenants} tenants, {self.api_keys} API keys"
            return f"{self.file}: a tenants file, taken: {counts}"
        return f"{self.file}: a configuration file, taken"


def verdict(path: Path, kind: str | None = None) -> Verdict:
    """What a sidecar would make of `path` as `kind` (None: a file that declares
    `tenants:` is a tenants file, any other a configuration file)."""
    try:
        if kind is None:
            kind = TENANTS if declares_tenants(path) else CONFIG
        if kind == CONFIG:
            read_config(path)
            return Verdict(str(path), CONFIG)
        declared: DeclaredTenants = read_tenants(path).declared
    except FileRefused as refusal:
        return Verdict(str(path), kind or CONFIG, str(refusal))
    keys = sum(len(tenant.digests) for tenant in declared.tenants.values())
    return Verdict(str(path), TENANTS, tenants=len(declared.tenants), api_keys=keys)


def schema(kind: str) -> dict[str, Any]:
    """The JSON Schema a file of `kind` is held to."""
    model = TenantsFile if kind == TENANTS else QosConfig
    found = model.model_json_schema()
    found["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return found


def add_actions(actions: Any) -> None:
    validate = actions.add_parser(
        "validate",
        help="check configuration or tenants files as a sidecar would, without Redis "
        "(exit code 2 if any is refused)",
    )
    validate.add_argument("files", type=Path, nargs="+", metavar="FILE")
    _add_kind_argument(validate, "read every file as this kind (default: by its content)")
    add_output_argument(validate)
    validate.set_defaults(run=_validate)
    described = actions.add_parser(
        "schema", help="the JSON Schema of the configuration file (or the tenants file)"
    )
    _add_kind_argument(described, "the schema of this kind of file (default: config)")
    described.set_defaults(run=_schema)


def _add_kind_argument(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--kind", choices=(CONFIG, TENANTS), default=None, help=help)


def _validate(args: argparse.Namespace) -> int:
    found = [verdict(path, args.kind) for path in args.files]
    if args.output == "json":
        print_json([{**asdict(v), "taken": v.taken} for v in found])
    else:
        for one in found:
            print(one.describe())
    return 0 if all(one.taken for one in found) else 2


def _schema(args: argparse.Namespace) -> int:
    print(json.dumps(schema(args.kind or CONFIG), indent=2))
    return 0
