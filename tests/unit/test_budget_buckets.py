"""A request's buckets, remembered for the configuration in force."""

from __future__ import annotations

from sidecar.config.base import Tier
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot
from sidecar.request.admission import budget
from sidecar.request.admission.budget import BucketsMemo, budget_buckets
from sidecar.request.admission.identity import Identity

ACME = Identity("acme", Tier.P1, "api_key", "acme")


def snapshot(version: int, p1_share: float) -> Snapshot:
    config = QosConfig.from_partial(
        {
            "tiers": {"p0": {"share": 0.3}, "p1": {"share": p1_share}},
            "controller": {"enabled": False, "floors": {"p0": 0.1, "p1": 0.1}},
        }
    )
    tenants = {"acme": Tenant(tier=Tier.P1, rate_tokens_per_second=500.0)}
    return Snapshot(version, config, tenants)


def test_the_memo_gives_the_buckets_the_configuration_gives():
    memo, held = BucketsMemo(), snapshot(1, 0.4)
    pool = held.default_pool
    first = memo(held, ACME, pool, 1000.0)
    assert first == budget_buckets(held, ACME, pool, 1000.0)
    assert [b.owner.value for b in first] == ["tier", "tenant"]
    # Its callers may change the list they are given: the memo's stays as it was.
    first.clear()
    assert memo(held, ACME, pool, 1000.0) == budget_buckets(held, ACME, pool, 1000.0)
    # Another capacity, another tenant: their own buckets.
    assert memo(held, ACME, pool, 2000.0)[0].rate == 2 * memo(held, ACME, pool, 1000.0)[0].rate
    anonymous = Identity(None, Tier.P1, "default", "anonymous")
    assert len(memo(held, anonymous, pool, 1000.0)) == 1


def test_a_new_configuration_starts_the_memo_anew():
    memo, before, after = BucketsMemo(), snapshot(1, 0.4), snapshot(2, 0.5)
    rate_before = memo(before, ACME, before.default_pool, 1000.0)[0].rate
    rate_after = memo(after, ACME, after.default_pool, 1000.0)[0].rate
    assert (rate_before, rate_after) == (400.0, 500.0)


def test_the_memo_stays_within_its_bound(monkeypatch):
    monkeypatch.setattr(budget, "MEMO_ENTRIES", 3)
    memo, held = BucketsMemo(), snapshot(1, 0.4)
    for capacity in range(1, 10):
        rate = memo(held, ACME, held.default_pool, float(capacity) * 100)[0].rate
        assert rate == capacity * 40.0
        assert len(memo._known) <= 3
