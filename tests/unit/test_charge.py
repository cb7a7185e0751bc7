"""A charge's figures, worked out once as it is made."""

from __future__ import annotations

import dataclasses

from sidecar.request.policy.cost import Charge


def test_a_charge_reserves_what_it_asked_within_its_ceiling():
    charge = Charge(100, 50, 1.0, 2.0)
    assert (charge.prompt_cost, charge.asked, charge.reserved) == (100.0, 200.0, 200.0)
    capped = dataclasses.replace(charge, ceiling=120.0)
    assert capped.reserved == 120.0 and capped.asked == 200.0
    assert charge.reserved == 200.0 and charge.ceiling is None
    assert dataclasses.replace(charge, ceiling=500.0).reserved == 200.0
