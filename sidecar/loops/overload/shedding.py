"""Which tiers to shed for overload, with hysteresis. Pure: no I/O.

`SheddingState.update` runs each time the cluster load is refreshed (every ~100 ms), not
per request; a request only reads the result. A tier starts shedding when a signal
crosses its threshold and stops only once the signal is `hysteresis` back past it.

When it is foreseen back (`recovery`, the Retry-After of its sheds): the signal must
recover by some share of what the engines hold (the free KV's deficit over the KV in
use, the in-flight excess over the requests in flight); the time until that share of the
work in flight has ended, each tier's requests held as long as lately and the tiers
still admitted above it starting theirs at their pace lately, is `Pace`'s (over the
slots this sidecar holds, gives back and takes). A request's share of the KV is taken
as its share of the slots.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecar.config.base import TIERS, Tier
from sidecar.config.pools import Pool
from sidecar.config.schema import QosConfig, TierConfig
from sidecar.loops.overload.load import ClusterLoad
from sidecar.loops.overload.pace import Pace
from sidecar.refusals import Reason


def _gate(active: bool, value: float, threshold: float, hysteresis: float, above: bool) -> bool:
    """Shed while `value` is past `threshold` (above or below it), with hysteresis."""
    if above:
        return value > threshold - (hysteresis if active else 0.0)
    return value < threshold + (hysteresis if active else 0.0)


def _share(deficit: float, held: float) -> float | None:
    """The share of what is held that must go for a deficit to close."""
    return min(max(deficit, 0.0) / held, 1.0) if held > 0 else None


@dataclass
class SheddingState:
    """Per tier: the overload rule now shedding it, if any. The monitor keeps one over all
    pods and one per pool (`pools`); a request reads its pool's."""

    shedding: dict[Tier, Reason | None] = field(default_factory=lambda: dict.fromkeys(Tier))
    # Per tier shed by a rule: the seconds until it is foreseen admitted again, if known.
    recovery: dict[Tier, float | None] = field(default_factory=lambda: dict.fromkeys(Tier))
    load: ClusterLoad = field(default_factory=lambda: ClusterLoad((), None, 0))
    pools: dict[str, SheddingState] = field(default_factory=dict)
    # What the pool's engines serve a second while their queues are full, when measured
    # (served.py): the capacity in force when below the figure.
    served: float | None = None
    # How fast the pool's requests in flight end and start lately (None: not known).
    pace: Pace | None = None

    def for_pool(self, name: str) -> SheddingState:
        return self.pools.get(name, self)

    def figure(self, pool: Pool) -> float:
        """The pool's capacity as told: what its fresh pods say they prefill, else the
        configured figure."""
        return self.load.capacity_tokens_per_second or pool.capacity_tokens_per_second

    def capacity(self, pool: Pool) -> float:
        """The pool's capacity in force: the figure told, or what its engines were
        measured to serve lately when that is less."""
        told = self.figure(pool)
        return told if self.served is None else min(told, self.served)

    def update(
        self,
        load: ClusterLoad,
        config: QosConfig,
        gateway_in_flight: int = 0,
        pool: Pool | None = None,
        pace: Pace | None = None,
    ) -> None:
        """`gateway_in_flight`: requests the sidecars hold slots for, cluster-wide; the
        in-flight rule uses it or the engines' own count, whichever is higher. `pool`: the
        pool whose thresholds and limit apply (default: the top-level ones). `pace`: how
        fast its requests in flight end and start lately, None when not known."""
        self.load = load
        self.pace = pace
        in_flight = max(load.in_flight, gateway_in_flight)
        tiers = pool.tiers if pool else config.tiers
        max_concurrency = (pool.fleet if pool else config.fleet).max_concurrency
        hysteresis = config.overload.hysteresis
        admitted: list[Tier] = []  # the tiers above the one at hand that are not shed
        for tier in TIERS:
            settings = tiers[tier]
            rule = self._rule(
                settings, tier, load, in_flight / max_concurrency, config, self.shedding[tier]
            )
            self.shedding[tier] = rule
            share = None
            if rule is Reason.SHED_KV_WATERMARK and settings.shed_below_free_kv is not None:
                free = load.free_kv_ratio or 0.0
                share = _share(settings.shed_below_free_kv + hysteresis - free, 1.0 - free)
            elif rule is Reason.SHED_INFLIGHT and settings.shed_above_inflight is not None:
                back = settings.shed_above_inflight - hysteresis
                share = _share(in_flight - back * max_concurrency, in_flight)
            self.recovery[tier] = (
                None if share is None or pace is None else pace.seconds(share, admitted)
            )
            if rule is None:
                admitted.append(tier)

    @staticmethod
    def _rule(
        tier_config: TierConfig,
        tier: Tier,
        load: ClusterLoad,
        in_flight: float,
        config: QosConfig,
        was: Reason | None,
    ) -> Reason | None:
        hysteresis = config.overload.hysteresis
        if not load.known:
            return Reason.SHED_NO_REPORTS if tier in config.overload.shed_without_reports else None
        # The hard maximum itself is not a shedding rule: at it, requests wait in the
        # admission queue for a slot (P0 first) rather than being refused.
        threshold = tier_config.shed_below_free_kv
        if (
            threshold is not None
            and load.free_kv_ratio is not None
            and _gate(
                was is Reason.SHED_KV_WATERMARK, load.free_kv_ratio, threshold, hysteresis, False
            )
        ):
            return Reason.SHED_KV_WATERMARK
        threshold = tier_config.shed_above_inflight
        if threshold is not None and _gate(
            was is Reason.SHED_INFLIGHT, in_flight, threshold, hysteresis, True
        ):
            return Reason.SHED_INFLIGHT
        return None


def eviction_needed(state: SheddingState, pool: Pool, config: QosConfig) -> float:
    """The KV blocks to free in `pool` by ending streams of its evictable tiers: while its
    free KV (with what was admitted since its reports) is below
    overload.evict_below_free_kv and a tier above them is shed for the memory, what brings
    it back `hysteresis` above that line; else 0. (A request the engine preempted waits
    for memory too, but may be of the evictable tiers themselves: the engines do not say
    whose.)"""
    line = config.overload.evict_below_free_kv
    load = state.load
    free = load.free_kv_ratio
    if line is None or free is None or free >= line or load.kv_blocks_total <= 0:
        return 0.0
    above = [tier for tier in TIERS if not pool.tiers[tier].evictable]
    if not any(state.shedding[tier] is Reason.SHED_KV_WATERMARK for tier in above):
        return 0.0
    return (line + config.overload.hysteresis - free) * load.kv_blocks_total
