"""The interactive-beside-batch mix: bursts of the size and spacing asked, a batch backlog
at the load asked."""

from __future__ import annotations

import pytest

from sidecar.tooling.benchmarks import fleet as fleets
from sidecar.tooling.benchmarks.interactive_mix import Settings, backlog, bursts


@pytest.fixture
def fleet():
    return fleets.mocks(1, 1.0, True)


def test_bursts_come_in_groups_of_the_size_asked_at_the_spacing_asked(fleet):
    settings = Settings(seconds=20, burst_every=4, burst_size=6, burst_spread=0.2)
    requests = bursts(settings, fleet)
    assert len(requests) == 5 * 6  # at 2, 6, 10, 14 and 18 s
    assert {request.caller.tier for request in requests} == {"p0"}
    for index, start in enumerate((2, 6, 10, 14, 18)):
        group = requests[index * 6 : (index + 1) * 6]
        assert all(start <= request.at <= start + 0.2 for request in group), group


def test_the_backlog_offers_batch_at_its_load_of_the_fleets_prefill(fleet):
    settings = Settings(seconds=200, batch_load=1.5)
    requests = backlog(settings, fleet)
    assert {request.caller.tier for request in requests} == {"p2"}
    offered = sum(request.prompt_tokens for request in requests) / settings.seconds
    # Drawn: within 15 % of 1.5 times the tokens a second the fleet prefills.
    assert offered == pytest.approx(1.5 * fleet.capacity_tokens_per_second, rel=0.15)
