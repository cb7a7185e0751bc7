"""`qos-sidecar bench SCENARIO`: the scenarios, each with its own flags."""

from __future__ import annotations

import argparse

from sidecar.options import add_arguments as add_settings
from sidecar.options import from_args
from sidecar.tooling.benchmarks import interactive_mix, promo

# Each scenario: its module (with Settings and main) and what it does, in a line.
SCENARIOS = {
    "promo": (promo, "the flash sale at 2.5x capacity, without and with QoS"),
    "mix": (
        interactive_mix,
        "interactive bursts beside a batch backlog: alone, without and with QoS",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scenarios = parser.add_subparsers(dest="scenario", required=True)
    for name, (module, summary) in SCENARIOS.items():
        scenario = scenarios.add_parser(
            name,
            help=summary,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_settings(scenario, module.Settings)
        scenario.set_defaults(
            run=lambda args, module=module: module.main(from_args(module.Settings, args))
        )
