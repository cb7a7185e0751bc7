"""The `qos-sidecar` command: one subcommand a module, each with a Settings class and main()."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from sidecar import __version__
from sidecar.options import add_arguments, from_args

# name → (module with `Settings` and `main(settings) -> int`, one-line summary)
COMMANDS = {
    "serve": ("sidecar.server", "run the ext_proc sidecar (gRPC) and its admin HTTP server"),
    "up": ("sidecar.stack.up", "run the local stack: Redis, sidecar, Envoy, mock vLLM replicas"),
    "mock-vllm": ("sidecar.mockvllm.server", "run the vLLM stand-in: one simulated GPU"),
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
        add_arguments(sub, module.Settings)
        sub.set_defaults(module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.module.main(from_args(args.module.Settings, args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
