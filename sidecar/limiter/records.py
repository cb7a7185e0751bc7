"""What a charge records of its admission for its pool's projected load, and where.

The token-bucket script that charges an admission records it in the hash of the tier's
bucket in its pool (read and written with the level: no extra round trip, no extra
command), per `SLOT_MS` of Redis time; every sidecar reads those records back with the
pods' reports (overload/admission_records.py) and projects them (overload/admitted.py).
"""

from __future__ import annotations

from dataclasses import dataclass

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
