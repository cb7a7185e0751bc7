from __future__ import annotations

import pytest

from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot, hash_api_key
from sidecar.request.admission.identity import IdentityResolver, Unauthenticated, bearer_token
from tests.unit.clock import Clock

KEYS = {hash_api_key("k-acme"): "acme", hash_api_key("k-gone"): "gone"}
TENANTS = {"acme": Tenant(tier=Tier.P1), "pay": Tenant(tier=Tier.P0)}


class Directory:
    """The Redis lookup, counted."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, digest: str) -> str | None:
        self.calls += 1
        return KEYS.get(digest)


def snapshot(version: int = 1, **identity) -> Snapshot:
    return Snapshot(version, QosConfig.from_partial({"identity": identity}), TENANTS)


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_bearer_token_parsing():
    assert bearer_token({"authorization": "bearer  abc "}) == "abc"
    assert bearer_token({"authorization": "Basic abc"}) is None
    assert bearer_token({"authorization": "Bearer"}) is None
    assert bearer_token({}) is None


@pytest.mark.asyncio
async def test_api_key_resolves_to_its_tenants_tier_and_is_cached():
    directory = Directory()
    resolver = IdentityResolver(directory, Clock())
    for _ in range(3):
        identity = await resolver.resolve(auth("k-acme"), snapshot())
        assert (identity.tenant, identity.tier, identity.source) == ("acme", Tier.P1, "api_key")
    assert directory.calls == 1


@pytest.mark.asyncio
async def test_unknown_identity_gets_the_default_tier_or_a_refusal():
    resolver = IdentityResolver(Directory(), Clock())
    anonymous = await resolver.resolve({}, snapshot())
    assert (anonymous.tenant, anonymous.tier, anonymous.tenant_label) == (
        None,
        Tier.P2,
        "anonymous",
    )
    # A key whose tenant was removed is as unknown as a made-up one.
    assert (await resolver.resolve(auth("k-gone"), snapshot())).tenant is None
    with pytest.raises(Unauthenticated):
        await resolver.resolve(auth("nope"), snapshot(2, unknown="reject"))


@pytest.mark.asyncio
async def test_sources_are_tried_in_the_configured_order():
    resolver = IdentityResolver(Directory(), Clock())
    headers = {**auth("k-acme"), "x-tenant-id": "pay"}
    assert (await resolver.resolve(headers, snapshot())).tenant == "acme"  # header not listed
    by_header = snapshot(2, sources=["header", "api_key"])
    assert (await resolver.resolve(headers, by_header)).tier is Tier.P0
    unknown_header = {**auth("k-acme"), "x-tenant-id": "stranger"}
    assert (await resolver.resolve(unknown_header, by_header)).tenant == "acme"


@pytest.mark.asyncio
async def test_unknown_keys_are_remembered_for_the_negative_ttl():
    directory, clock = Directory(), Clock()
    resolver = IdentityResolver(directory, clock)
    config = snapshot(negative_cache_seconds=5)
    for _ in range(10):
        await resolver.resolve(auth("random"), config)
    assert directory.calls == 1
    clock.now = 6
    await resolver.resolve(auth("random"), config)
    assert directory.calls == 2


@pytest.mark.asyncio
async def test_a_flood_of_random_keys_costs_bounded_lookups():
    directory, clock = Directory(), Clock()
    resolver = IdentityResolver(directory, clock)
    config = snapshot(max_key_lookups_per_second=50)
    for second in range(3):
        clock.now = float(second)
        for attempt in range(1000):
            identity = await resolver.resolve(auth(f"guess-{second}-{attempt}"), config)
            assert identity.tier is Tier.P2
    assert directory.calls <= 50 * 3 + 1


@pytest.mark.asyncio
async def test_a_config_change_forgets_cached_keys():
    directory = Directory()
    resolver = IdentityResolver(directory, Clock())
    await resolver.resolve(auth("k-acme"), snapshot(1))
    KEYS[hash_api_key("k-late")] = "acme"
    try:
        assert (await resolver.resolve(auth("k-late"), snapshot(1))).tenant == "acme"
        calls = directory.calls
        await resolver.resolve(auth("k-acme"), snapshot(2))  # tenants may have moved
        assert directory.calls == calls + 1
    finally:
        del KEYS[hash_api_key("k-late")]


@pytest.mark.asyncio
async def test_a_key_known_before_still_counts_while_redis_is_away():
    import redis

    class Flaky(Directory):
        down = False

        async def __call__(self, digest):
            if self.down:
                raise redis.ConnectionError("refused")
            return await super().__call__(digest)

    directory, clock = Flaky(), Clock()
    resolver = IdentityResolver(directory, clock)
    assert (await resolver.resolve(auth("k-acme"), snapshot(1))).tenant == "acme"
    directory.down = True
    clock.now = 1000.0  # the known-key cache has long expired
    assert (await resolver.resolve(auth("k-acme"), snapshot(2))).tenant == "acme"
    assert (await resolver.resolve(auth("k-never-seen"), snapshot(2))).tenant is None


@pytest.mark.asyncio
async def test_a_key_s_tier_is_known_at_its_headers_through_config_changes():
    resolver = IdentityResolver(Directory(), Clock())
    assert resolver.known_tier(auth("k-acme"), snapshot(1)) is None  # never seen
    await resolver.resolve(auth("k-acme"), snapshot(1))
    assert resolver.known_tier(auth("k-acme"), snapshot(1)) is Tier.P1
    # A new configuration (the SLO controller moves shares every few seconds) forgets the
    # cached key for identifying requests, not as the hint of what a response may be.
    assert resolver.known_tier(auth("k-acme"), snapshot(2)) is Tier.P1
    assert resolver.known_tier(auth("k-unknown"), snapshot(2)) is None
