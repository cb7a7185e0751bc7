"""Weighted max-min fair shares and Jain's index. Pure.

The Lua script that admits requests keeps a simpler rule (a tenant served more than its
weight's part of the tier's rate may not take the bucket below its reserve); what that
rule converges to is the weighted max-min fair allocation computed here, which the
metrics and `tenants top` compare each tenant's service with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def max_min_shares(
    demands: Mapping[str, float], weights: Mapping[str, float], capacity: float
) -> dict[str, float]:
    """Each tenant's part of `capacity`: no tenant gets more than it asks for, and one
    that gets less than it asks has, per unit of weight, at least what any other has.
    Water-filling: tenants by demand per weight, each given the smaller of its demand and
    its weight's part of what is left."""
    shares: dict[str, float] = {}
    left = max(0.0, capacity)
    weight_left = sum(weights[t] for t in demands)
    for tenant in sorted(demands, key=lambda t: (demands[t] / weights[t], t)):
        part = left * weights[tenant] / weight_left if weight_left > 0 else 0.0
        shares[tenant] = min(max(0.0, demands[tenant]), part)
        left -= shares[tenant]
        weight_left -= weights[tenant]
    return shares


def jain_index(values: Iterable[float]) -> float | None:
    """(Σx)² / (n·Σx²): 1 when all are equal, 1/n when one has everything; None for none."""
    xs = list(values)
    squares = sum(x * x for x in xs)
    if not xs or squares == 0:
        return None
    return sum(xs) ** 2 / (len(xs) * squares)
