"""Where the budgets live in Redis and what their calls record there: the keys of the
tiers' and tenants' buckets and of the fair shares, and the admission records.

A tier's buckets share its hash tag, in every pool: one call touches one Redis Cluster
slot. The token-bucket script that charges an admission records it in the hash of the
tier's bucket in its pool (read and written with the level: no extra round trip), per
`SLOT_MS` of Redis time; every sidecar reads those records back with the pods' reports
(loops/overload/admission_records.py) and projects them (loops/overload/admitted.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.config.pools import DEFAULT_POOL

# Admissions are recorded per slot of Redis time this long.
SLOT_MS = 50
# A record nobody writes to any more goes after this long (the longest report TTL, and
# then some); readers drop its old slots sooner, by their own TTL.
RECORD_EXPIRE_MS = 61_000
# A slot's field: blocks * PACKED + requests (admission_record.lua).
PACKED = 2**20


@dataclass(frozen=True)
class AdmittedLoad:
    tier: str
    pool: str
    blocks: int  # the KV blocks its prompt takes when the engine schedules it
    # Recorded even when its budget refuses it (a tier never shed for budget).
    even_over_budget: bool = False


# A tier's buckets share its hash tag, in every pool: one call touches one Redis Cluster
# slot, and a tenant's own budget (one tier, any pool) sits in the slot of each pool's
# bucket for that tier. The default pool's keys carry no pool name.


def tier_bucket_key(tier: str, pool: str = DEFAULT_POOL) -> str:
    base = f"qos:{{bucket-{tier}}}:tier"
    return base if pool == DEFAULT_POOL else f"{base}:pool:{pool}"


def tenant_bucket_key(tier: str, tenant: str, pool: str | None = None) -> str:
    """A tenant's bucket: across pools, or in one pool when its rate there is its own."""
    base = f"qos:{{bucket-{tier}}}:tenant:{tenant}"
    return base if pool is None else f"{base}:pool:{pool}"


def fair_share_keys(tier: str, pool: str = DEFAULT_POOL) -> tuple[str, str]:
    """A tier's fair-share state and its active tenants, in the slot of its buckets. The
    state is the tier's bucket hash itself: token_bucket.lua reads and stores both in
    one command each."""
    bucket = tier_bucket_key(tier, pool)
    return bucket, bucket.replace(":tier", ":fair-active", 1)
