from __future__ import annotations

import pytest
from redis.crc import key_slot

from sidecar.budget_layout import tenant_bucket_key, tier_bucket_key
from sidecar.request.limiter.buckets import BucketSpec


def test_a_tiers_buckets_share_one_cluster_slot():
    tier, tenant = tier_bucket_key("p1"), tenant_bucket_key("p1", "acme")
    assert key_slot(tier.encode()) == key_slot(tenant.encode())
    assert key_slot(tier_bucket_key("p0").encode()) != key_slot(tier.encode())


def test_buckets_need_a_positive_rate_and_burst():
    with pytest.raises(ValueError, match="positive"):
        BucketSpec("k", rate=0, burst=1)
