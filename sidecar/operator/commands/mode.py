"""`qos-sidecar mode get|set|shed|unshed|log`: the operator's switches, in force within 1 s.

mode set core-only      only P0 is admitted (the brief's "protect transactions only")
mode set shadow         every decision is made and counted, nothing is refused
mode set normal         back to normal
mode shed p2            shed a tier outright, whatever the load; `unshed` ends it
mode log                the last switches: what, by whom, how and when
mode get --output json  the same as one JSON document (so is `mode log`), for scripts

Every switch is recorded with who made it (--by, by default user@host) and when, with
every other change (`qos-sidecar audit`).
"""

from __future__ import annotations

import argparse

from sidecar.config.audit import AuditEntry
from sidecar.config.base import Tier
from sidecar.config.operator_state import Mode, OperatorMode
from sidecar.config.store import AUDIT_KEPT, ConfigStore
from sidecar.config.switches import switch_mode, switch_shed
from sidecar.operator.commands.common import (
    actor,
    add_by_argument,
    add_output_argument,
    add_redis_argument,
    print_json,
    run_with_store,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    get = actions.add_parser("get", help="print the mode, the tiers shed by hand, the last switch")
    get.set_defaults(run=lambda args: run_with_store(args, _get))
    log = actions.add_parser("log", help="print the last switches, newest first")
    log.add_argument("--count", type=int, default=20)
    log.set_defaults(run=lambda args: run_with_store(args, _log))
    change = actions.add_parser("set", help="switch the mode on every sidecar")
    change.add_argument("mode", choices=[m.value for m in Mode])
    change.set_defaults(
        run=lambda args: run_with_store(
            args, lambda store, a: _switch(store, a, lambda m: switch_mode(m, Mode(a.mode)))
        )
    )
    shed = actions.add_parser("shed", help="shed a tier outright")
    unshed = actions.add_parser("unshed", help="stop shedding a tier by hand")
    for sub, shedding in ((shed, True), (unshed, False)):
        sub.add_argument("tier", choices=[t.value for t in Tier])
        sub.set_defaults(
            run=lambda args, shedding=shedding: run_with_store(
                args,
                lambda store, a: _switch(
                    store, a, lambda m: switch_shed(m, Tier(a.tier), shedding)
                ),
            )
        )
    for sub in (change, shed, unshed):
        add_by_argument(sub)
    for sub in (get, log):
        add_output_argument(sub)
    for sub in (get, log, change, shed, unshed):
        add_redis_argument(sub)


def _describe(mode: OperatorMode) -> str:
    shed = ",".join(sorted(t.value for t in mode.force_shed)) or "none"
    return f"mode: {mode.mode.value}\nforce-shed: {shed}"


async def _get(store: ConfigStore, args: argparse.Namespace) -> None:
    last = (await _switches(store))[:1]
    mode = (await store.load()).mode
    if args.output == "json":
        print_json(
            {
                "mode": mode.mode.value,
                "force_shed": sorted(t.value for t in mode.force_shed),
                "last_switch": last[0].to_dict() if last else None,
            }
        )
        return
    print(_describe(mode))
    print(f"last switch: {last[0].describe() if last else 'none recorded'}")


async def _log(store: ConfigStore, args: argparse.Namespace) -> None:
    switches = (await _switches(store))[: args.count]
    if args.output == "json":
        print_json([change.to_dict() for change in switches])
        return
    for change in switches:
        print(change.describe())


async def _switches(store: ConfigStore) -> list[AuditEntry]:
    """The switches of the mode among the changes recorded, newest first."""
    return [entry for entry in await store.audit(AUDIT_KEPT) if entry.kind == "mode"]


async def _switch(store: ConfigStore, args: argparse.Namespace, switch) -> None:
    held = await store.load()
    changed, what = switch(held.mode)
    # Into the store it read the mode from (StoreLost should Redis lose it meanwhile).
    version = await store.save_mode(changed, held.store_id or None, what=what, actor=actor(args))
    print(f"{_describe(changed)}\n(version {version})")
