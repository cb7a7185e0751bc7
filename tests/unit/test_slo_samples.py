from __future__ import annotations

import pytest

from sidecar.config.base import Tier
from sidecar.config.schema import QosConfig
from sidecar.loops.slo.samples import LATENCY, TTFT, Sample, compliance, met_target


def sample(age: float, met: bool) -> Sample:
    return Sample(age, met, 100.0, TTFT)


def test_compliance_counts_fresh_samples_only():
    samples = [sample(1, True)] * 9 + [sample(2, False)] + [sample(100, False)] * 50
    measured = compliance(samples, max_age=60, min_samples=5)
    assert measured.ratio == pytest.approx(0.9) and measured.samples == 10


def test_too_few_fresh_samples_mean_no_judgement():
    measured = compliance([sample(1, False)] * 4 + [sample(99, True)] * 100, 60, 5)
    assert measured.ratio is None and measured.samples == 4


def test_targets_by_kind():
    config = QosConfig()  # P0: first token within 1 s, whole answers within 10 s
    assert met_target(config, Tier.P0, TTFT, 0.999)
    assert not met_target(config, Tier.P0, TTFT, 1.001)
    assert met_target(config, Tier.P0, LATENCY, 9.0)
    assert not met_target(config, Tier.P2, LATENCY, 121.0)
