"""The `qos-sidecar` command: one subcommand a module.

A module either has `Settings` (a dataclass of flags, see sidecar.options) and
`main(settings) -> int`, or `add_arguments(parser)` that sets `run(args) -> int` itself
(commands with actions, such as `tenants add`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from sidecar import __version__
from sidecar.options import add_arguments, from_args

COMMANDS = {
    "serve": ("sidecar.server", "run the ext_proc sidecar (gRPC) and its admin HTTP server"),
    "up": (
        "sidecar.tooling.up",
        "run the local stack: Redis, sidecar, Envoy, mock vLLM replicas",
    ),
    "mock-vllm": ("sidecar.tooling.mockvllm.server", "run the vLLM stand-in: one simulated GPU"),
    "drain-envoy": (
        "sidecar.operator.drain",
        "drain the pod's Envoy before it and the sidecar stop (a preStop hook)",
    ),
    "report": (
        "sidecar.operator.reporter",
        "report one model server's load (vLLM, SGLang, TensorRT-LLM, TGI) to the sidecars",
    ),
    "tenants": (
        "sidecar.operator.commands.tenants",
        "add, list and remove tenants and their API keys",
    ),
    "config": (
        "sidecar.operator.commands.config",
        "show, set, import and export the QoS configuration; validate files offline",
    ),
    "mode": (
        "sidecar.operator.commands.mode",
        "get or switch the operator mode: normal, core-only, shadow",
    ),
    "audit": (
        "sidecar.operator.commands.audit",
        "list the changes made: who, how, when and what changed",
    ),
    "bench": (
        "sidecar.tooling.benchmarks.command",
        "run a benchmark scenario (promo: the flash sale)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qos-sidecar", description="Request-level QoS for LLM inference behind Envoy."
    )
    parser.add_argument("--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, summary) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = commands.add_parser(name, help=summary, description=summary)
        if hasattr(module, "add_arguments"):
            module.add_arguments(sub)
        else:
            add_arguments(sub, module.Settings)
            sub.set_defaults(run=lambda args, m=module: m.main(from_args(m.Settings, args)))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `qos-sidecar config export | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
