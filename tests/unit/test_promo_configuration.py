"""The flash sale's configuration is a valid one, and says what the bench's flags say."""

from __future__ import annotations

import pytest

from sidecar.config.base import Tier
from sidecar.config.schema import QosConfig
from sidecar.tooling.benchmarks.promo import Settings, configuration


def test_the_sale_sends_the_tiers_priorities_to_the_engines_by_default():
    config = QosConfig.from_partial(configuration(Settings()))
    assert config.engine.send_priority is True
    assert config.tiers[Tier.P2].max_prompt_tokens == 8192
    assert config.tiers[Tier.P1].output_weight == 0.0


def test_flags_change_priority_output_weight_and_the_starting_shares():
    settings = Settings(engine_priority=False, output_weight=1.0, shares="0.40,0.45,0.15")
    config = QosConfig.from_partial(configuration(settings))
    assert config.engine.send_priority is False
    assert [config.tiers[t].share for t in Tier] == [0.40, 0.45, 0.15]
    assert config.tiers[Tier.P1].output_weight == config.tiers[Tier.P2].output_weight == 1.0
    assert config.tiers[Tier.P0].output_weight == 0.0


@pytest.mark.parametrize("shares", ["0.4,0.6", "a,b,c", "0.4,0.4,0.1,0.1"])
def test_shares_are_three_numbers(shares):
    with pytest.raises(SystemExit, match="--shares"):
        configuration(Settings(shares=shares))
