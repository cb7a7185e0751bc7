"""Who sent a request: API key or trusted header → tenant → tier.

API keys are known by their SHA-256 (Redis never holds a raw key), first from the
configuration the sidecar holds (every key's hash is in its snapshot: a key works while
Redis is away or has lost it). A key not there yet (added since the snapshot) is looked
up in Redis: known keys are cached until the configuration changes; unknown keys are
remembered for `negative_cache_seconds`, and lookups of keys in neither cache are
rate-limited, so a flood of random keys costs Redis a bounded number of calls.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass

import redis.asyncio as redis
from cachetools import LRUCache, TTLCache

from sidecar import redis_errors
from sidecar.config.base import Tier
from sidecar.config.schema import IdentityConfig
from sidecar.config.snapshot import Snapshot, hash_api_key

KNOWN_KEY_SECONDS = 60.0
CACHE_ENTRIES = 100_000


ANONYMOUS = "anonymous"  # the label of requests of no known tenant


@dataclass(frozen=True)
class Identity:
    tenant: str | None  # None: no known identity, served in the default tier
    tier: Tier
    source: str  # "api_key", "header" or "default"
    tenant_label: str  # its name in buckets, metrics and logs: the tenant, or ANONYMOUS


class Unauthenticated(Exception):
    """No known identity, and the configuration refuses such requests."""


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The API key: `Authorization: Bearer KEY`, or `x-api-key: KEY` as Anthropic's
    clients send it."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() == "bearer" and token:
        return token
    return headers.get("x-api-key", "").strip() or None


class _LookupBudget:
    """A local token bucket for Redis lookups of keys no cache knows."""

    def __init__(self, per_second: float, clock: Callable[[], float]) -> None:
        self.per_second = per_second
        self._clock = clock
        self._tokens = per_second
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.per_second, self._tokens + (now - self._at) * self.per_second)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class IdentityResolver:
    def __init__(
        self,
        lookup_key_hash: Callable[[str], Awaitable[str | None]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup_key_hash
        self._clock = clock
        self._config: IdentityConfig | None = None
        self._version = -1
        # Every key seen known, kept through config changes, for when Redis is away.
        self._last_known: LRUCache[str, str] = LRUCache(CACHE_ENTRIES)

    def _caches_for(self, snapshot: Snapshot) -> IdentityConfig:
        if snapshot.version != self._version:  # tenants or keys may have changed
            config = snapshot.config.identity
            self._known: TTLCache[str, str] = TTLCache(
                CACHE_ENTRIES, KNOWN_KEY_SECONDS, timer=self._clock
            )
            self._unknown: TTLCache[str, bool] = TTLCache(
                CACHE_ENTRIES, max(config.negative_cache_seconds, 1e-9), timer=self._clock
            )
            if self._config is None or (
                self._config.max_key_lookups_per_second != config.max_key_lookups_per_second
            ):
                self._budget = _LookupBudget(config.max_key_lookups_per_second, self._clock)
            self._config, self._version = config, snapshot.version
        assert self._config is not None
        return self._config

    async def resolve(self, headers: Mapping[str, str], snapshot: Snapshot) -> Identity:
        config = self._caches_for(snapshot)
        for source, tenant, digest in self._named(headers, config, snapshot):
            if tenant is None and digest:
                tenant = await self._tenant_for_key(digest)
            if tenant is not None and tenant in snapshot.tenants:
                return Identity(tenant, snapshot.tenants[tenant].tier, source, tenant)
        if config.unknown == "reject":
            raise Unauthenticated
        return Identity(None, config.default_tier, "default", ANONYMOUS)

    def known_tier(self, headers: Mapping[str, str], snapshot: Snapshot) -> Tier | None:
        """The tier of a request as far as it is known without asking Redis (a key its
        snapshot holds, or one seen before, even under an older configuration: a hint,
        whose request is still identified in full; a tenant header); None: not known."""
        config = self._caches_for(snapshot)
        for _source, tenant, digest in self._named(headers, config, snapshot):
            if tenant is None and digest:
                tenant = self._known.get(digest) or self._last_known.get(digest)
            if tenant is not None and tenant in snapshot.tenants:
                return snapshot.tenants[tenant].tier
        return None

    @staticmethod
    def _named(
        headers: Mapping[str, str], config: IdentityConfig, snapshot: Snapshot
    ) -> Iterator[tuple[str, str | None, str]]:
        """Each source's tenant, in order, as the headers name it: (source, the tenant
        known from the snapshot, the key's digest to look up when it is not)."""
        for source in config.sources:
            if source == "api_key":
                token = bearer_token(headers)
                if token:
                    digest = hash_api_key(token)
                    yield source, snapshot.api_keys.get(digest), digest
            elif source == "header":
                yield source, headers.get(config.tenant_header) or None, ""

    async def _tenant_for_key(self, digest: str) -> str | None:
        if digest in self._known:
            return self._known[digest]
        if digest in self._unknown or not self._budget.take():
            return None
        try:
            tenant = await self._lookup(digest)
        except redis.RedisError:
            # Redis is away: a key known before is still that tenant's.
            redis_errors.note("identity")
            return self._last_known.get(digest)
        if tenant is not None:
            self._last_known[digest] = tenant
        if tenant is None:
            if self._config and self._config.negative_cache_seconds > 0:
                self._unknown[digest] = True
        else:
            self._known[digest] = tenant
        return tenant
