"""Sample windows in a real redis-server: pushed by sidecars, their compliance counted in
Redis as samples.compliance counts a list of samples."""

from __future__ import annotations

import pytest

from sidecar.config.base import Tier
from sidecar.config.slo_config import SloConfig
from sidecar.loops.slo.samples import TTFT, SampleStore, samples_key

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_compliance_counts_the_fresh_samples_of_each_window(aredis):
    store = SampleStore(aredis)
    slo = SloConfig(window=20, max_sample_age_seconds=60, min_samples=5)
    # Stale samples of a minute and more ago, under newer ones: they do not count.
    seconds, _ = await aredis.time()
    stale = [f"{(seconds - 61) * 1000} 0 10.0 ttft"] * 5
    await aredis.lpush(samples_key(Tier.P1), *stale)
    batch = {
        ("default", Tier.P0): [(True, 10.0, TTFT)] * 9 + [(False, 900.0, TTFT)],
        ("default", Tier.P1): [(False, 10.0, TTFT)] * 2 + [(True, 10.0, TTFT)] * 6,
        ("chat", Tier.P0): [(True, 10.0, TTFT)] * 3,
    }
    await store.push(batch, slo.window)
    measured = await store.compliance(slo, ["default", "chat"])
    assert measured["default"][Tier.P0].ratio == pytest.approx(0.9)
    assert measured["default"][Tier.P0].samples == 10
    assert measured["default"][Tier.P1].ratio == pytest.approx(6 / 8)
    assert measured["default"][Tier.P1].samples == 8  # the stale five left out
    assert measured["chat"][Tier.P0].ratio is None  # 3 fresh: too few to judge
    assert measured["chat"][Tier.P0].samples == 3
    assert measured["default"][Tier.P2].samples == 0

    # Only the window's newest samples count: 20 met ones hide the rest.
    await store.push({("default", Tier.P0): [(True, 10.0, TTFT)] * 25}, 100)
    measured = await store.compliance(slo, ["default"])
    assert measured["default"][Tier.P0].ratio == 1.0
    assert measured["default"][Tier.P0].samples == 20
