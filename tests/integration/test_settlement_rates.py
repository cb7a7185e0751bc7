"""Output settlement at the rates tenants really have, through real Envoy: a request
reserves no more than its tenant's bucket holds and owes the rest after its answer, so
a tenant whose burst is smaller than its usual max_tokens is served at its rate, not
refused forever, and not served above it."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.helpers import flood, stack_with_tenants

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CAP = 512  # P1's max_tokens_cap here
PROMPT = [{"role": "user", "content": "x" * 24}]  # 6 tokens of text, 10 with the template
# tenant: (rate in tokens a second, the max_tokens it asks for, clients asking at once:
# enough to offer more than the rate, as an answer takes ~0.15 s here)
TENANTS = {
    "writer": (300, 200, 4),
    "small": (100, CAP, 4),
    "medium": (1_000, CAP, 4),
    "large": (10_000, CAP, 16),
}
SECONDS = 20
BURST_SECONDS = 0.5  # the default: 150 tokens for the writer, less than one answer


@pytest.fixture(scope="module")
def rates_stack(tmp_path_factory):
    with stack_with_tenants(tmp_path_factory.mktemp("rates"), {}, time_scale=0.01) as stack:
        for name, (rate, _, _) in TENANTS.items():
            stack.config.tenant(name, "p1", f"rates-{name}", rate_tokens_per_second=rate)
        stack.config.set({"tiers": {"p1": {"output_weight": 1.0, "max_tokens_cap": CAP}}})
        yield stack


async def test_tenants_at_any_rate_are_served_at_it_with_output_charged(rates_stack):
    async def one(name: str) -> tuple[str, float]:
        rate, max_tokens, clients = TENANTS[name]
        body = {"messages": PROMPT, "max_tokens": max_tokens}
        # A tenth of a second after a refusal: four tenants' refusals at full speed would
        # be more than two cores decide beside the answers.
        usages = await flood(
            rates_stack.envoy_url, SECONDS, body, f"rates-{name}", clients=clients, pause=0.1
        )
        served = sum(u["prompt_tokens"] + u["completion_tokens"] for u in usages)
        return name, served / (rate * (SECONDS + BURST_SECONDS))

    shares = dict(await asyncio.gather(*(one(name) for name in TENANTS)))
    print("served / rate:", {name: round(share, 3) for name, share in shares.items()})
    for name, share in shares.items():
        assert 0.70 <= share <= 1.15, (name, shares)
