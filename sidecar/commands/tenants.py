"""`qos-sidecar tenants add|list|remove`: who is in which tier, and their API keys."""

from __future__ import annotations

import argparse
import secrets

from pydantic import ValidationError

from sidecar.commands.common import CommandError, add_redis_argument, run_with_store
from sidecar.config.schema import Tenant, Tier, describe
from sidecar.config.store import ConfigStore
from sidecar.fairness.usage import read_tier_fairness

KEY_PREFIX = "qsk-"


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add a tenant (or change its tier) and give it a key")
    add.add_argument("name")
    add.add_argument("--tier", required=True, choices=[t.value for t in Tier])
    add.add_argument("--api-key", help="the key to accept; without it, one is made and printed")
    add.add_argument(
        "--no-key", action="store_true", help="no API key (the tenant is named by a trusted header)"
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
        default=[],
        metavar="POOL=N",
        help="a budget of the tenant's own in one model pool, tokens a second, instead of "
        "its --rate there (repeat for more pools)",
    )
    add.add_argument("--burst-seconds", type=float, default=0.5)
    add.add_argument(
        "--weight",
        type=float,
        default=1.0,
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
    for sub in (add, listing, remove, top):
        add_redis_argument(sub)


async def _add(store: ConfigStore, args: argparse.Namespace) -> None:
    if not args.name or len(args.name) > 200 or any(c.isspace() for c in args.name):
        raise CommandError("a tenant name is 1 to 200 characters without spaces")
    try:
        tenant = Tenant(
            tier=args.tier,
            rate_tokens_per_second=args.rate_tokens_per_second,
            pool_rates=_pool_rates(args.pool_rate),
            burst_seconds=args.burst_seconds,
            weight=args.weight,
        )
    except ValidationError as error:
        raise CommandError(describe(error)) from None
    made = None
    api_key = args.api_key
    if api_key is None and not args.no_key:
        api_key = made = new_api_key()
    await store.put_tenant(args.name, tenant, api_key)
    if made:
        print(made)


def _pool_rates(pairs: list[str]) -> dict[str, str]:
    rates = {}
    for pair in pairs:
        pool, equals, rate = pair.partition("=")
        if not equals or not pool or not rate:
            raise CommandError(f"--pool-rate {pair!r}: POOL=N, e.g. chat=300")
        rates[pool] = rate
    return rates


async def _list(store: ConfigStore, _args: argparse.Namespace) -> None:
    snapshot = await store.load()
    print(
        f"{'TENANT':<24} {'TIER':<5} {'RATE (tokens/s)':>16} {'WEIGHT':>7} {'KEYS':>5}  POOL RATES"
    )
    for name in sorted(snapshot.tenants):
        tenant = snapshot.tenants[name]
        rate = (
            "-" if tenant.rate_tokens_per_second is None else f"{tenant.rate_tokens_per_second:g}"
        )
        keys = await store.key_count(name)
        pools = " ".join(f"{pool}={value:g}" for pool, value in sorted(tenant.pool_rates.items()))
        line = f"{name:<24} {tenant.tier.value:<5} {rate:>16} {tenant.weight:>7g} {keys:>5}"
        print(f"{line}  {pools}".rstrip())


async def _remove(store: ConfigStore, args: argparse.Namespace) -> None:
    if not await store.remove_tenant(args.name):
        raise CommandError(f"no tenant named {args.name!r}")


async def _top(store: ConfigStore, args: argparse.Namespace) -> None:
    snapshot = await store.load()
    for pool in snapshot.pools:
        for tier in Tier:
            fairness = await read_tier_fairness(
                store.client,
                snapshot.config.fairness,
                tier.value,
                pool.name,
                snapshot.tier_rate(tier, pool),
            )
            index = "-" if fairness.index is None else f"{fairness.index:.3f}"
            print(
                f"{pool.name} {tier.value}: rate {fairness.rate:,.0f} tokens/s, "
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
