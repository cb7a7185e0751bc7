"""A request's budgets: the tier's bucket in its pool (shared fairly by the tier's
tenants) and its tenant's own, with their rates, bursts and debts; whom a waiter waits
behind; and the refusal of a prompt no burst of them holds. Pure."""

from __future__ import annotations

from sidecar.budget_layout import fair_share_keys, tenant_bucket_key, tier_bucket_key
from sidecar.config.operator_state import Tenant
from sidecar.config.pools import Pool
from sidecar.config.store import Snapshot
from sidecar.refusals import Reason, Refusal
from sidecar.request.admission.identity import Identity
from sidecar.request.limiter.buckets import BucketSpec, FairShare, Owner, Verdict


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


def waiting_key(refused: BucketSpec) -> str:
    """Whom a request waits behind: those of its bucket or, in a tier shared fairly, those
    of its own tenant (a tenant over its share waits for what lies above the tier's
    reserve; the others must not wait behind it)."""
    return refused.key if refused.fair is None else f"{refused.key}|{refused.fair.tenant}"


def budget_reason(verdict: Verdict) -> Reason:
    return Reason.SHED_FAIR_SHARE if verdict.over_fair_share else Reason.SHED_TIER_BUDGET


def budget_refusal(identity: Identity, cost: float, verdict: Verdict, first: BucketSpec) -> Refusal:
    """Why a request its budgets refused is answered: its tier is shed, its tenant is
    over its rate, or no burst will ever hold it."""
    refused = verdict.refused or first
    if verdict.retry_after is None:
        return too_big(identity, cost, refused)
    if refused.owner is Owner.TENANT:
        return Refusal(
            Reason.TENANT_RATE_LIMITED,
            f"Rate limit reached for tenant {identity.tenant_label}.",
            retry_after=verdict.retry_after,
        )
    reason = budget_reason(verdict)
    return Refusal(reason, f"Tier {identity.tier.value} is shed: {reason.value}.")


def too_big(identity: Identity, cost: float, bucket: BucketSpec) -> Refusal:
    """A prompt no burst of this budget holds: the message names the bucket, its size
    and the burst that would admit it."""
    seconds = cost / bucket.rate
    if bucket.owner is Owner.TENANT:
        whose = f"tenant {identity.tenant_label}'s budget"
        fix = (
            f"`qos-sidecar tenants add {identity.tenant_label} --update "
            f"--burst-seconds {seconds:.2g}`"
        )
    else:
        whose = f"tier {identity.tier.value}'s budget"
        fix = f"tiers.{identity.tier.value}.burst_seconds {seconds:.2g}"
    return Refusal(
        Reason.COST_EXCEEDS_BURST,
        f"This request's prompt costs {cost:.0f} budget tokens, more than the "
        f"{bucket.burst:.0f} {whose} can ever hold ({bucket.rate:g} tokens/s, "
        f"{bucket.burst / bucket.rate:g} s of burst). Shorten the prompt, or give the "
        f"budget a burst of {seconds:.2g} s: {fix}.",
    )
