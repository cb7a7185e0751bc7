"""`qos-sidecar bench SCENARIO`: the scenarios, each with its own flags."""

from __future__ import annotations

import argparse

from sidecar.options import add_arguments as add_settings
from sidecar.options import from_args
from sidecar.tooling.benchmarks import promo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scenarios = parser.add_subparsers(dest="scenario", required=True)
    sale = scenarios.add_parser(
        "promo",
        help="the flash sale at 2.5x capacity, without and with QoS",
        description=promo.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_settings(sale, promo.Settings)
    sale.set_defaults(run=lambda args: promo.main(from_args(promo.Settings, args)))
