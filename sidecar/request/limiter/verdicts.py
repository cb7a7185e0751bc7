"""What a refusal by the buckets tells the client: its tier is shed, its tenant is over its
rate, or no burst will ever hold the request. Pure."""

from __future__ import annotations

from sidecar.refusals import Reason, Refusal, shed
from sidecar.request.limiter.buckets import BucketSpec, Owner, Verdict


def budget_reason(verdict: Verdict) -> Reason:
    return Reason.SHED_FAIR_SHARE if verdict.over_fair_share else Reason.SHED_TIER_BUDGET


def budget_refusal(
    tier: str, tenant: str, cost: float, verdict: Verdict, first: BucketSpec
) -> Refusal:
    """Why a request of `tier` and `tenant` its buckets refused is answered."""
    refused = verdict.refused or first
    if verdict.retry_after is None:
        return too_big(tier, tenant, cost, refused)
    if refused.owner is Owner.TENANT:
        return Refusal(
            Reason.TENANT_RATE_LIMITED,
            f"Rate limit reached for tenant {tenant}.",
            retry_after=verdict.retry_after,
        )
    # Shed for the tier's budget: to come back once the bucket has refilled.
    return shed(budget_reason(verdict), tier, verdict.retry_after)


def too_big(tier: str, tenant: str, cost: float, bucket: BucketSpec) -> Refusal:
    """A prompt no burst of this budget holds: the message names the bucket, its size
    and the burst that would admit it."""
    seconds = cost / bucket.rate
    if bucket.owner is Owner.TENANT:
        whose = f"tenant {tenant}'s budget"
        fix = f"`qos-sidecar tenants add {tenant} --update --burst-seconds {seconds:.2g}`"
    else:
        whose = f"tier {tier}'s budget"
        fix = f"tiers.{tier}.burst_seconds {seconds:.2g}"
    return Refusal(
        Reason.COST_EXCEEDS_BURST,
        f"This request's prompt costs {cost:.0f} budget tokens, more than the "
        f"{bucket.burst:.0f} {whose} can ever hold ({bucket.rate:g} tokens/s, "
        f"{bucket.burst / bucket.rate:g} s of burst). Shorten the prompt, or give the "
        f"budget a burst of {seconds:.2g} s: {fix}.",
    )
