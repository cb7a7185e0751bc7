from __future__ import annotations

import pytest
from pydantic import ValidationError

from sidecar.config.base import FallbackKind, Tier, describe
from sidecar.config.schema import QosConfig


def refusal(document) -> str:
    with pytest.raises(ValidationError) as error:
        QosConfig.from_partial(document)
    return describe(error.value)


def test_defaults_are_the_briefs():
    config = QosConfig()
    assert [config.tiers[t].share for t in Tier] == [0.60, 0.35, 0.05]
    assert {config.tiers[t].burst_seconds for t in Tier} == {0.5}
    assert config.tiers[Tier.P0].max_tokens_cap == 512
    assert config.tiers[Tier.P0].sheddable is False
    assert config.identity.default_tier is Tier.P2
    assert config.tier_rate(Tier.P1) == pytest.approx(0.35 * 50_000)
    assert "retry in 15 s" in config.tiers[Tier.P2].message()


def test_a_partial_document_keeps_the_other_defaults():
    config = QosConfig.from_partial(
        {"tiers": {"p0": {"weight": 2}}, "fleet": {"max_concurrency": 9}}
    )
    assert config.tiers.p0.weight == 2
    assert config.tiers.p0.max_tokens_cap == 512  # P0's own default survives
    assert config.fleet.max_concurrency == 9
    assert config.fleet.capacity_tokens_per_second == 50_000


def test_unknown_keys_are_refused_by_name():
    message = refusal({"tiers": {"p2": {"wieght": 2}}, "bogus": 1})
    assert "tiers.p2.wieght: unknown key" in message
    assert "bogus: unknown key" in message


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ({"tiers": {"p1": {"weight": -1}}}, "tiers.p1.weight"),
        ({"tiers": {"p2": {"share": 1.5}}}, "tiers.p2.share"),
        ({"tiers": {"p2": {"share": 0.5}}}, "shares add up to 1.45"),
        ({"tiers": {"p2": {"fallback": "maybe"}}}, "tiers.p2.fallback"),
        ({"tiers": {"p2": {"fallback_message": "retry in {when}"}}}, "tiers.p2.fallback_message"),
        ({"identity": {"sources": ["api_key", "api_key"]}}, "each source once"),
        ({"identity": {"default_tier": "p9"}}, "identity.default_tier"),
        ({"fleet": {"capacity_tokens_per_second": "lots"}}, "fleet.capacity_tokens_per_second"),
    ],
)
def test_bad_values_are_refused_naming_the_key(document, named):
    assert named in refusal(document)


def test_documents_round_trip_through_json():
    config = QosConfig.from_partial({"tiers": {"p2": {"fallback": "error"}}})
    again = QosConfig.model_validate_json(config.model_dump_json())
    assert again == config
    assert again.tiers.p2.fallback is FallbackKind.ERROR
