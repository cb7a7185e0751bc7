"""`qos-sidecar tenants add|list|remove|top`: who is in which tier, and their API keys.
`list` and `top` take `--output json` for scripts."""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sidecar.config.base import Tier, describe
from sidecar.config.operator_state import Tenant
from sidecar.config.snapshot import hash_api_key
from sidecar.config.store import ConfigStore
from sidecar.config.tenants import NAME_RULE, KeyHeld, TenantInvalid, check_name
from sidecar.loops.fairness.usage import TierFairness, read_tier_fairness
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

KEY_PREFIX = "qsk-"


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser(
        "add", help="add a tenant and give it a key (--update: change an existing one)"
    )
    add.add_argument("name", help=f"the tenant's name: {NAME_RULE}")
    add.add_argument("--tier", choices=[t.value for t in Tier], help="required for a new tenant")
    add.add_argument(
        "--api-key",
        help="the key to accept; without it, one is made and printed (a key given here "
        "shows in the process list: --api-key-file keeps it out)",
    )
    add.add_argument(
        "--api-key-file",
        type=Path,
        help="read the key to accept from this file's first line (- for standard input)",
    )
    add.add_argument(
        "--no-key", action="store_true", help="no API key (the tenant is named by a trusted header)"
    )
    add.add_argument(
        "--update",
        action="store_true",
        help="change an existing tenant: the options given, and a key beside its others",
    )
    add.add_argument(
        "--move-key",
        action="store_true",
        help="take --api-key from the tenant that holds it (else that is refused)",
    )
    add.add_argument(
        "--rate",
        type=float,
        dest="rate_tokens_per_second",
        help="the tenant's own budget inside its tier, tokens a second",
    )
    add.add_argument(
        "--pool-rate",
        action="append",
        default=None,
        metavar="POOL=N",
        help="a budget of the tenant's own in one model pool, tokens a second, instead of "
        "its --rate there (repeat for more pools)",
    )
    add.add_argument("--burst-seconds", type=float, help="its bucket's burst (default 0.5)")
    add.add_argument(
        "--weight",
        type=float,
        help="its weight in the tier's fair shares while the tier is contended (default 1)",
    )
    add.set_defaults(run=lambda args: run_with_store(args, _add))
    listing = actions.add_parser("list", help="list tenants")
    listing.set_defaults(run=lambda args: run_with_store(args, _list))
    remove = actions.add_parser("remove", help="remove a tenant and revoke its keys")
    remove.add_argument("name")
    remove.set_defaults(run=lambda args: run_with_store(args, _remove))
    top = actions.add_parser(
        "top", help="per tier: active tenants, Jain's fairness index, the most served tenants"
    )
    top.add_argument("--count", type=int, default=10, help="tenants shown per tier")
    top.set_defaults(run=lambda args: run_with_store(args, _top))
    for sub in (add, remove):
        add_override_argument(sub, "the tenant")
        add_by_argument(sub)
    for sub in (listing, top):
        add_output_argument(sub)
    for sub in (add, listing, remove, top):
        add_redis_argument(sub)


# What `tenants add` may change, by option.
_FIELDS = ("tier", "rate_tokens_per_second", "pool_rates", "burst_seconds", "weight")


async def _add(store: ConfigStore, args: argparse.Namespace) -> None:
    try:
        check_name(args.name)
    except TenantInvalid as error:
        raise CommandError(str(error)) from None
    await refuse_declared(store, args, f"tenant {args.name}", args.name)
    existing = (await store.load()).tenants.get(args.name)
    if existing is not None and not args.update:
        raise CommandError(
            f"tenant {args.name!r} exists (tier {existing.tier.value}, "
            f"{await store.key_count(args.name)} keys); add --update to change it"
        )
    if existing is None and args.update:
        raise CommandError(f"no tenant named {args.name!r} to update")
    given = {
        "tier": args.tier,
        "rate_tokens_per_second": args.rate_tokens_per_second,
        "pool_rates": _pool_rates(args.pool_rate) if args.pool_rate is not None else None,
        "burst_seconds": args.burst_seconds,
        "weight": args.weight,
    }
    if existing is None and args.tier is None:
        raise CommandError("a new tenant needs --tier")
    before = existing.model_dump(mode="json") if existing else {}
    fields = {**before, **{key: value for key, value in given.items() if value is not None}}
    try:
        tenant = Tenant.model_validate(fields)
    except ValidationError as error:
        raise CommandError(describe(error)) from None
    made = None
    api_key = _given_key(args)
    if api_key is None and not args.no_key and existing is None:
        api_key = made = new_api_key()
    if api_key is not None and args.move_key:
        # Taking a key from a tenant a file declares changes what the file declares.
        holder = await store.tenant_for_key_hash(hash_api_key(api_key))
        if holder is not None and holder != args.name:
            await refuse_declared(store, args, f"the key's tenant {holder}", holder)
    try:
        put = await store.put_tenant_reporting(
            args.name, tenant, api_key, move_key=args.move_key, actor=actor(args)
        )
    except KeyHeld as held:
        raise CommandError(f"{held}; --move-key to take it from {held.holder!r}") from None
    except TenantInvalid as error:
        raise CommandError(str(error)) from None
    if made:
        print(made)
    if existing is not None:
        after = tenant.model_dump(mode="json")
        changes = [
            f"{key} {_shown(before.get(key))} -> {_shown(after[key])}"
            for key in _FIELDS
            if before.get(key) != after[key]
        ]
        if api_key is not None:
            changes.append(f"a key added ({await store.key_count(args.name)} keys)")
        print(f"{args.name}: {', '.join(changes) or 'nothing changed'}")
    if put.moved_from:
        print(f"the key was moved from tenant {put.moved_from!r}")


def _given_key(args: argparse.Namespace) -> str | None:
    if args.api_key_file is None:
        return args.api_key
    if args.api_key is not None:
        raise CommandError("--api-key or --api-key-file, not both")
    try:
        text = sys.stdin.read() if str(args.api_key_file) == "-" else args.api_key_file.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"--api-key-file: {error}") from None
    key = text.splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise CommandError("--api-key-file: no key in it")
    return key


def _shown(value: object) -> str:
    return "-" if value in (None, {}) else str(value)


def _pool_rates(pairs: list[str]) -> dict[str, str]:
    rates = {}
    for pair in pairs:
        pool, equals, rate = pair.partition("=")
        if not equals or not pool or not rate:
            raise CommandError(f"--pool-rate {pair!r}: POOL=N, e.g. chat=300")
        rates[pool] = rate
    return rates


async def _list(store: ConfigStore, args: argparse.Namespace) -> None:
    snapshot = await store.load()
    if args.output == "json":
        listed = []
        for name in sorted(snapshot.tenants):
            tenant = snapshot.tenants[name]
            listed.append(
                {
                    "name": name,
                    "tier": tenant.tier.value,
                    "rate_tokens_per_second": tenant.rate_tokens_per_second,
                    "burst_seconds": tenant.burst_seconds,
                    "weight": tenant.weight,
                    "keys": await store.key_count(name),
                    "pool_rates": dict(sorted(tenant.pool_rates.items())),
                }
            )
        print_json(listed)
        return
    print(
        f"{'TENANT':<24} {'TIER':<5} {'RATE (tokens/s)':>16} {'BURST (s)':>9} {'WEIGHT':>7} "
        f"{'KEYS':>5}  POOL RATES"
    )
    for name in sorted(snapshot.tenants):
        tenant = snapshot.tenants[name]
        rate = (
            "-" if tenant.rate_tokens_per_second is None else f"{tenant.rate_tokens_per_second:g}"
        )
        keys = await store.key_count(name)
        pools = " ".join(f"{pool}={value:g}" for pool, value in sorted(tenant.pool_rates.items()))
        line = (
            f"{name:<24} {tenant.tier.value:<5} {rate:>16} {tenant.burst_seconds:>9g} "
            f"{tenant.weight:>7g} {keys:>5}"
        )
        print(f"{line}  {pools}".rstrip())


async def _remove(store: ConfigStore, args: argparse.Namespace) -> None:
    await refuse_declared(store, args, f"tenant {args.name}", args.name)
    if not await store.remove_tenant(args.name, actor=actor(args)):
        raise CommandError(f"no tenant named {args.name!r}")


async def _top(store: ConfigStore, args: argparse.Namespace) -> None:
    snapshot = await store.load()
    found = []
    for pool in snapshot.pools:
        for tier in Tier:
            fairness = await read_tier_fairness(
                store.client,
                snapshot.config.fairness,
                tier.value,
                pool.name,
                snapshot.tier_rate(tier, pool),
            )
            found.append((pool.name, tier, fairness))
    if args.output == "json":
        print_json([_top_json(pool, tier, fairness, args.count) for pool, tier, fairness in found])
        return
    for pool_name, tier, fairness in found:
        index = "-" if fairness.index is None else f"{fairness.index:.3f}"
        print(
            f"{pool_name} {tier.value}: rate {fairness.rate:,.0f} tokens/s, "
            f"{len(fairness.tenants)} active, fairness index {index}"
        )
        if not fairness.tenants:
            continue
        print(
            f"  {'TENANT':<24} {'WEIGHT':>7} {'SERVED/s':>10} {'REFUSED/s':>10} "
            f"{'ENTITLED/s':>11} {'SERVED/ENTITLED':>16}"
        )
        for usage in fairness.top(args.count):
            ratio = usage.served / usage.entitled if usage.entitled > 0 else 0.0
            print(
                f"  {usage.tenant:<24} {usage.weight:>7g} {usage.served:>10,.0f} "
                f"{usage.refused:>10,.0f} {usage.entitled:>11,.0f} {ratio:>16.2f}"
            )


def _top_json(pool: str, tier: Tier, fairness: TierFairness, count: int) -> dict[str, Any]:
    return {
        "pool": pool,
        "tier": tier.value,
        "rate_tokens_per_second": fairness.rate,
        "active_tenants": len(fairness.tenants),
        "fairness_index": fairness.index,
        "tenants": [
            {
                "tenant": usage.tenant,
                "weight": usage.weight,
                "served_tokens_per_second": usage.served,
                "refused_tokens_per_second": usage.refused,
                "entitled_tokens_per_second": usage.entitled,
            }
            for usage in fairness.top(count)
        ],
    }
