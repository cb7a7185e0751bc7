"""A request's budgets: the tier's bucket in its pool (shared fairly by the tier's
tenants) and its tenant's own, with their rates, bursts and debts. Pure, but for a
memo of them: the same tenant asks the same buckets over and over."""

from __future__ import annotations

from sidecar.budget_layout import fair_share_keys, tenant_bucket_key, tier_bucket_key
from sidecar.config.operator_state import Tenant
from sidecar.config.pools import Pool
from sidecar.config.store import Snapshot
from sidecar.request.admission.identity import Identity
from sidecar.request.limiter.buckets import BucketSpec, FairShare, Owner


def budget_buckets(
    snapshot: Snapshot, identity: Identity, pool: Pool, capacity: float
) -> list[BucketSpec]:
    tier = identity.tier
    settings = pool.tiers[tier]
    rate = snapshot.share(tier, pool) * capacity
    burst = rate * settings.burst_seconds
    tenant = snapshot.tenants.get(identity.tenant or "")
    fair = _fair_share(snapshot, identity, tenant, pool, burst)
    debt = settings.max_debt_seconds
    buckets = [BucketSpec(tier_bucket_key(tier.value, pool.name), rate, burst, fair, rate * debt)]
    if tenant is not None:
        tenant_rate, kept_for = tenant.rate_in(pool.name)
        if tenant_rate is not None:
            key = tenant_bucket_key(tier.value, identity.tenant_label, kept_for)
            tenant_burst = tenant_rate * tenant.burst_seconds
            owed = tenant_rate * debt
            buckets.append(BucketSpec(key, tenant_rate, tenant_burst, None, owed, Owner.TENANT))
    return buckets


def _fair_share(
    snapshot: Snapshot, identity: Identity, tenant: Tenant | None, pool: Pool, burst: float
) -> FairShare | None:
    """Who asks the tier's bucket, for its fair shares (None: fairness is off)."""
    fairness = snapshot.config.fairness
    if not fairness.enabled:
        return None
    state_key, active_key = fair_share_keys(identity.tier.value, pool.name)
    return FairShare(
        state_key,
        active_key,
        identity.tenant_label,
        tenant.weight if tenant is not None else 1.0,
        fairness.window_seconds,
        fairness.active_seconds,
        fairness.reserve * burst,
    )


# Tenant, pool and capacity combinations remembered at most, before the memo starts anew.
MEMO_ENTRIES = 4096


class BucketsMemo:
    """budget_buckets(), kept for the configuration in force: a new snapshot (config,
    tenants or the controller's shares changed) starts it anew."""

    def __init__(self) -> None:
        self._snapshot: Snapshot | None = None  # held: its buckets are the memo's
        self._known: dict[tuple[Identity, str, float], tuple[BucketSpec, ...]] = {}

    def __call__(
        self, snapshot: Snapshot, identity: Identity, pool: Pool, capacity: float
    ) -> list[BucketSpec]:
        if snapshot is not self._snapshot or len(self._known) >= MEMO_ENTRIES:
            self._snapshot, self._known = snapshot, {}
        key = (identity, pool.name, capacity)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = tuple(budget_buckets(snapshot, identity, pool, capacity))
        return list(found)
