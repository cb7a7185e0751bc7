"""The flash sale's configuration is a valid one, and says what the bench's flags say."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.config.base import Tier
from sidecar.config.schema import QosConfig
from sidecar.tooling.benchmarks import fleet
from sidecar.tooling.benchmarks.promo import Settings, configuration, overflowing
from sidecar.tooling.benchmarks.traffic import CALLERS
from sidecar.tooling.stack.stack import StackOptions

MOCKS = fleet.mocks(replicas=2, time_scale=1.0, chunked=True)


def test_the_sale_sends_the_tiers_priorities_to_the_engines_by_default():
    config = QosConfig.from_partial(configuration(Settings(), MOCKS))
    assert config.engine.send_priority is True
    assert config.tiers[Tier.P2].max_prompt_tokens == 8192
    assert config.tiers[Tier.P1].output_weight == 0.0
    assert config.fleet.capacity_tokens_per_second == pytest.approx(2 * 16_384)


def test_a_fleet_of_shorter_prompts_caps_batch_prompts_as_much_shorter():
    engines = fleet.Fleet("1 engine", "measured", fleet.scaled(CALLERS, 9), 5.0, prompt_scale=9)
    config = QosConfig.from_partial(configuration(Settings(), engines))
    assert config.tiers[Tier.P2].max_prompt_tokens == 8192 // 9
    assert config.fleet.capacity_tokens_per_second == pytest.approx(
        5.0 * sum(c.share * c.mean_prompt() for c in engines.callers)
    )


def test_flags_change_priority_output_weight_and_the_starting_shares():
    settings = Settings(engine_priority=False, output_weight=1.0, shares="0.40,0.45,0.15")
    config = QosConfig.from_partial(configuration(settings, MOCKS))
    assert config.engine.send_priority is False
    assert [config.tiers[t].share for t in Tier] == [0.40, 0.45, 0.15]
    assert config.tiers[Tier.P1].output_weight == config.tiers[Tier.P2].output_weight == 1.0
    assert config.tiers[Tier.P0].output_weight == 0.0


def test_the_fleet_s_concurrency_is_the_default_unless_given():
    default = QosConfig.from_partial(configuration(Settings(), MOCKS))
    assert default.fleet.max_concurrency == QosConfig().fleet.max_concurrency
    limited = QosConfig.from_partial(configuration(Settings(max_concurrency=24), MOCKS))
    assert limited.fleet.max_concurrency == 24


@pytest.mark.parametrize("shares", ["0.4,0.6", "a,b,c", "0.4,0.4,0.1,0.1"])
def test_shares_are_three_numbers(shares):
    with pytest.raises(SystemExit, match="--shares"):
        configuration(Settings(shares=shares), MOCKS)


def test_with_overflow_the_first_pools_p1_and_p2_overflow_to_the_second():
    options = StackOptions(Path("unused"), pools=2, replicas=2)
    overflow = overflowing(options)
    config = QosConfig.from_partial({**configuration(Settings(), MOCKS), **overflow})
    pool_a, pool_b = config.pools["pool-a"], config.pools["pool-b"]
    assert pool_a.tiers[Tier.P1]["overflow"] == pool_a.tiers[Tier.P2]["overflow"] == ["pool-b"]
    assert Tier.P0 not in pool_a.tiers  # payments never leave their model
    assert pool_b.models == ("model-b",) and pool_b.max_model_len == 40_960


def test_shares_outside_what_the_configuration_allows_are_refused_plainly():
    config = QosConfig.from_partial(configuration(Settings(shares="0.40,0.45,0.15"), MOCKS))
    assert config.tiers[Tier.P1].share == pytest.approx(0.45)
    with pytest.raises(SystemExit, match=r"tiers\.p0\.share 0\.3 is outside the controller"):
        configuration(Settings(shares="0.30,0.30,0.40"), MOCKS)
    with pytest.raises(SystemExit, match="three numbers"):
        configuration(Settings(shares="0.5,0.5"), MOCKS)
