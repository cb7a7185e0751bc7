"""`qos-sidecar mode get|set|shed|unshed`: the operator's switches, in force within 1 s.

mode set core-only      only P0 is admitted (the brief's "protect transactions only")
mode set shadow         every decision is made and counted, nothing is refused
mode set normal         back to normal
mode shed p2            shed a tier outright, whatever the load; `unshed` ends it
"""

from __future__ import annotations

import argparse

from sidecar.commands.common import add_redis_argument, run_with_store
from sidecar.config.schema import Mode, OperatorMode, Tier
from sidecar.config.store import ConfigStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    get = actions.add_parser("get", help="print the mode and the tiers shed by hand")
    get.set_defaults(run=lambda args: run_with_store(args, _get))
    change = actions.add_parser("set", help="switch the mode on every sidecar")
    change.add_argument("mode", choices=[m.value for m in Mode])
    change.set_defaults(run=lambda args: run_with_store(args, _set))
    shed = actions.add_parser("shed", help="shed a tier outright")
    unshed = actions.add_parser("unshed", help="stop shedding a tier by hand")
    for sub, shedding in ((shed, True), (unshed, False)):
        sub.add_argument("tier", choices=[t.value for t in Tier])
        sub.set_defaults(
            run=lambda args, shedding=shedding: run_with_store(
                args, lambda store, a: _shed(store, a, shedding)
            )
        )
    for sub in (get, change, shed, unshed):
        add_redis_argument(sub)


def _describe(mode: OperatorMode) -> str:
    shed = ",".join(sorted(t.value for t in mode.force_shed)) or "none"
    return f"mode: {mode.mode.value}\nforce-shed: {shed}"


async def _get(store: ConfigStore, _args: argparse.Namespace) -> None:
    print(_describe((await store.load()).mode))


async def _set(store: ConfigStore, args: argparse.Namespace) -> None:
    current = (await store.load()).mode
    changed = current.model_copy(update={"mode": Mode(args.mode)})
    version = await store.save_mode(changed)
    print(f"{_describe(changed)}\n(version {version})")


async def _shed(store: ConfigStore, args: argparse.Namespace, shedding: bool) -> None:
    current = (await store.load()).mode
    tier = Tier(args.tier)
    tiers = current.force_shed | {tier} if shedding else current.force_shed - {tier}
    changed = current.model_copy(update={"force_shed": frozenset(tiers)})
    version = await store.save_mode(changed)
    print(f"{_describe(changed)}\n(version {version})")
