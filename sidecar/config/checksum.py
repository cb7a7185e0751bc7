"""The checksum of what operators set, as Redis stores it (config/recovery.py tells a part
lost or changed behind the version by it): the document, the mode, the controller's
shares, the declared document's file, then the tenants, the API keys and the declared
tenants' files. The record of changes and the controller's moves are history, not state,
and are left out.

A hash's entries count in sorted order (Redis's own order, which a put back or a rehash
may change, does not count), so a hash can be read in pages (HSCAN) without holding
Redis for the whole of it; they are joined by NUL, which neither a name (a safe
character set), a digest, nor JSON holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence


def of(strings: Sequence[bytes | None], hashes: Sequence[Mapping[bytes, bytes]]) -> str:
    total = hashlib.sha256()
    for value in strings:
        total.update(b"-" if value is None else b"=%d:%s" % (len(value), value))
    for entries in hashes:
        total.update(b"#%d" % len(entries))
        total.update(b"\0".join(b"%s\0%s" % entry for entry in sorted(entries.items())))
    return total.hexdigest()


def as_stored(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def of_texts(strings: Sequence[str | bytes | None], hashes: Sequence[Mapping[str, str]]) -> str:
    """The checksum of values as a writer sends them (text, stored as UTF-8)."""
    return of(
        [as_stored(value) for value in strings],
        [{field.encode(): value.encode() for field, value in h.items()} for h in hashes],
    )
