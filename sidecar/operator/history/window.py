"""The history window: the last `SECONDS` seconds of the cluster, as the page charts them.
Pure: no I/O.

Every sidecar adds, each second, to the second of Redis's clock (history/store.py):
counters (decisions by pool, tier and outcome or shed reason; first-token times in
buckets) add up over the sidecars; gauges (free KV, in flight, the limit, shares, the
rule shedding a tier, the mode) are the cluster's, as every sidecar sees them. Field
names: `d|pool|tier|admit` or `d|pool|tier|<reason>`, `o|pool|tier|<from pool>` (admitted
here for the pool that shed them), `t|pool|tier|<bucket ms>`, `g|pool|<name>` and
`g|<name>`.

Kept as a column a field, one value a second, and advanced a second at a time: a refresh
touches only the seconds it read again (the newest few), so building the page each
second costs the same however full the window is.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Iterable, Mapping

SECONDS = 600  # ten minutes
# First-token time buckets (upper bounds, ms); the last catches the rest.
TTFT_BUCKETS_MS = (50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 10000, 30000)
P99_OVER_SECONDS = 10  # a chart's p99 at a second is over the samples of the 10 s up to it
RATE_SECONDS = 10  # a tier's decisions a second, on the screen: over 10 s
_TEXT = ("g|mode", "|shedding|")  # gauges whose values are words, not numbers

Value = float | str | None


def ttft_bucket(seconds: float) -> int:
    """The bucket a first-token time falls in (its upper bound, ms)."""
    index = bisect.bisect_left(TTFT_BUCKETS_MS, seconds * 1000)
    return TTFT_BUCKETS_MS[min(index, len(TTFT_BUCKETS_MS) - 1)]


class Window:
    def __init__(self) -> None:
        self.now: int | None = None  # the window's last second
        self._columns: dict[str, deque[Value]] = {}
        self._p99: dict[tuple[str, str], deque[float | None]] = {}
        self._stale_p99: dict[tuple[str, str], int] = {}  # from which second to redo

    def advance(self, now: int) -> None:
        """The window ends at `now`: older seconds drop off, new ones start empty."""
        if self.now is None or now - self.now >= SECONDS:
            self.now = now
            self._extend(SECONDS)
            return
        self._extend(max(0, now - self.now))
        self.now = max(self.now, now)

    def _extend(self, seconds: int) -> None:
        """Every column `seconds` longer, the new seconds empty."""
        for column in self._columns.values():
            column.extend([None] * seconds)
        for p99 in self._p99.values():
            p99.extend([None] * seconds)

    def merge(self, second: int, fields: Mapping[str, str]) -> None:
        """What Redis holds for `second` now (it replaces what was read of it before:
        sidecars add to a second until it is over)."""
        if self.now is None or second > self.now:
            self.advance(second)
        assert self.now is not None
        index = second - self.now - 1  # from the right end: -1 is now
        if index < -SECONDS or index >= 0:
            return  # outside the window
        for name, text in fields.items():
            column = self._columns.get(name)
            if column is None:
                column = self._columns[name] = deque([None] * SECONDS, maxlen=SECONDS)
            column[index] = _value(name, text)
        for key in {(n.split("|")[1], n.split("|")[2]) for n in fields if n.startswith("t|")}:
            self._stale_p99[key] = min(second, self._stale_p99.get(key, second))

    def _redo_p99(self) -> None:
        """Each stale p99 from its first stale second on, by a rolling sum of the buckets
        over P99_OVER_SECONDS (once a refresh, however many seconds it merged)."""
        assert self.now is not None
        for (pool, tier), since in self._stale_p99.items():
            column = self._p99.get((pool, tier))
            if column is None:
                column = self._p99[(pool, tier)] = deque([None] * SECONDS, maxlen=SECONDS)
            buckets = [self._list(f"t|{pool}|{tier}|{b}") for b in TTFT_BUCKETS_MS]
            first = max(since - self.now - 1, -SECONDS)  # index from the right end
            sums = [0.0] * len(buckets)
            start = first - P99_OVER_SECONDS + 1
            for index in range(start, 0):
                dropped = index - P99_OVER_SECONDS  # leaves the 10 s as `index` enters
                for b, values in enumerate(buckets):
                    if index >= -SECONDS:
                        sums[b] += values[index] or 0.0  # type: ignore[operator]
                    if dropped >= max(start, -SECONDS):
                        sums[b] -= values[dropped] or 0.0  # type: ignore[operator]
                if index >= first:
                    counts = zip(TTFT_BUCKETS_MS, sums, strict=True)
                    column[index] = percentile_of_buckets(counts, 0.99)
        self._stale_p99.clear()

    def series(self) -> dict:
        """The window, one value a second, as the page draws it."""
        if self.now is None:
            return {"now": None, "start": None, "pools": {}, "mode": []}
        self._redo_p99()
        pools = sorted(
            {name.split("|")[1] for name in self._columns if name.count("|") >= 2} - {"mode"}
        )
        return {
            "now": self.now,
            "start": self.now - SECONDS + 1,
            "pools": {pool: self._pool(pool) for pool in pools},
            "mode": self._list("g|mode"),
        }

    def _pool(self, pool: str) -> dict:
        kinds = (f"d|{pool}|", f"t|{pool}|", f"o|{pool}|")
        tiers = sorted({n.split("|")[2] for n in self._columns if n.startswith(kinds)})
        return {
            "tiers": {tier: self._tier(pool, tier) for tier in tiers},
            **{
                name: self._list(f"g|{pool}|{name}")
                for name in ("free_kv", "projected_free_kv", "in_flight", "max_concurrency")
            },
        }

    def _tier(self, pool: str, tier: str) -> dict:
        prefix = f"d|{pool}|{tier}|"
        reasons = sorted(n[len(prefix) :] for n in self._columns if n.startswith(prefix))
        moved = f"o|{pool}|{tier}|"
        sources = sorted(n[len(moved) :] for n in self._columns if n.startswith(moved))
        p99 = self._p99.get((pool, tier))
        return {
            "admitted": self._counts(prefix + "admit"),
            "shed": {r: self._counts(prefix + r) for r in reasons if r != "admit"},
            "overflowed_in": {source: self._counts(moved + source) for source in sources},
            "ttft_p99_ms": list(p99) if p99 is not None else [None] * SECONDS,
            "share": self._list(f"g|{pool}|share|{tier}"),
            "shedding": self._list(f"g|{pool}|shedding|{tier}"),
        }

    def tier_rates(self, settled_after: int, seconds: int = RATE_SECONDS) -> dict[str, dict]:
        """Each tier's decisions a second, cluster-wide (every pool, every sidecar), over
        the `seconds` seconds before the newest `settled_after` ones (those sidecars may
        still be adding to): admitted, and answered by the sidecar (shed or refused)."""
        rates: dict[str, dict[str, float]] = {}
        if self.now is None:
            return rates
        end = SECONDS - settled_after
        for name, column in self._columns.items():
            if not name.startswith("d|"):
                continue
            _, _, tier, kind = name.split("|", 3)
            recent = itertools.islice(column, end - seconds, end)
            total = sum(float(value or 0.0) for value in recent)
            counted = rates.setdefault(tier, {"admitted": 0.0, "shed": 0.0})
            counted["admitted" if kind == "admit" else "shed"] += total / seconds
        return rates

    def _list(self, name: str) -> list[Value]:
        column = self._columns.get(name)
        return list(column) if column is not None else [None] * SECONDS

    def _counts(self, name: str) -> list[Value]:
        return [value or 0.0 for value in self._list(name)]


def _value(name: str, text: str) -> Value:
    if any(marker in name for marker in _TEXT):
        return text or None
    try:
        return float(text) if text != "" else None
    except ValueError:
        return None


def percentile_of_buckets(buckets: Iterable[tuple[int, float]], q: float) -> float | None:
    """The upper bound of the bucket the q-th quantile falls in; None without samples."""
    ordered = sorted(buckets)
    total = sum(count for _, count in ordered)
    if total <= 0:
        return None
    seen = 0.0
    for bound, count in ordered:
        seen += count
        if seen >= q * total:
            return float(bound)
    return float(ordered[-1][0])
