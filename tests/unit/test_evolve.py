"""evolved(): dataclasses.replace for the decision's frozen value objects."""

from __future__ import annotations

import dataclasses

import pytest

from sidecar.evolve import evolved
from sidecar.request.policy.cost import Charge


def test_a_copy_with_the_changes_and_the_original_untouched():
    charge = Charge(100, 50, 1.0, 2.0)
    capped = evolved(charge, ceiling=120.0)
    assert type(capped) is Charge
    assert capped == dataclasses.replace(charge, ceiling=120.0)
    assert capped.reserved == 120.0 and charge.reserved == 200.0
    assert charge.ceiling is None


def test_the_copy_stays_frozen():
    capped = evolved(Charge(1, 1, 1.0, 1.0), ceiling=1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        capped.ceiling = 2.0  # type: ignore[misc]
