"""The capacity in force follows what the engine serves, through real Envoy: one mock GPU
far slower than the configured figure, sent payments faster than it serves them; the
sidecar measures what it serves from the answers' ends while the backlog grows, puts
that in force, and its tiers' budgets follow."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest

from sidecar.tooling.stack.admin_client import scrape
from tests.integration.helpers import stack_with_tenants

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY = "served-p0"
# Two sequences at once, 20 ms a decode step: answers of 20 tokens end five a second,
# some 500 prompt tokens a second in all (a P0 answer costs its prompt); the figure
# says forty times that.
GPU = ("--max-num-seqs", "2", "--decode-step-ms", "20")
CONFIGURED = 20_000.0
SENT_PER_SECOND = 10  # twice what it serves: the backlog grows


def figures(admin_url: str) -> tuple[float, float | None, float]:
    """The capacity in force, the measure (None while none), P1's budget rate."""
    samples = scrape(f"{admin_url}/metrics")
    return (
        samples['qos_pool_capacity_tokens_per_second{pool="default"}'],
        samples.get('qos_pool_served_tokens_per_second{pool="default"}'),
        samples['qos_pool_tier_rate_tokens_per_second{pool="default",tier="p1"}'],
    )


@pytest.mark.timeout(120)
async def test_an_engine_slower_than_its_figure_cuts_the_capacity_in_force(tmp_path):
    tenants = {"tenant-p0": ("p0", KEY)}
    with stack_with_tenants(tmp_path, tenants, replicas=1, mock_args=GPU, time_scale=1.0) as stack:
        stack.config.set({"fleet": {"capacity_tokens_per_second": CONFIGURED}})
        admin = stack.sidecar_admin_url
        in_force, served, p1_rate = figures(admin)
        assert in_force == CONFIGURED and served is None
        api = openai.AsyncOpenAI(base_url=f"{stack.envoy_url}/v1", api_key=KEY, max_retries=0)
        prompt_tokens: list[int] = []

        async def pay() -> None:
            answer = await api.chat.completions.create(
                model="mock-llm",
                messages=[{"role": "user", "content": "pay " * 100}],
                max_tokens=20,
                extra_body={"ignore_eos": True},
            )
            assert answer.usage is not None
            prompt_tokens.append(answer.usage.prompt_tokens)

        async with api:
            sent: list[asyncio.Task] = []
            started = time.monotonic()
            try:
                deadline = started + 60
                while time.monotonic() < deadline:
                    sent.append(asyncio.create_task(pay()))
                    failed = [t.exception() for t in sent if t.done() and t.exception()]
                    assert not failed, failed
                    in_force, served, rate = await asyncio.to_thread(figures, admin)
                    if in_force < 0.1 * CONFIGURED:
                        break
                    await asyncio.sleep(1 / SENT_PER_SECOND)
                else:
                    raise AssertionError(f"capacity in force still {in_force} after 60 s")
            finally:
                for task in sent:
                    task.cancel()
                await asyncio.gather(*sent, return_exceptions=True)
        seconds = time.monotonic() - started
        # What the engine served (its own prompt counts), against what was measured.
        served_rate = sum(prompt_tokens) / seconds
        assert served is not None and in_force == served
        assert 0.8 * served_rate < served < 5 * served_rate  # on its way down from the figure
        # P1's budget follows (its share may move a little: the SLO controller steers it).
        assert rate < 0.2 * p1_rate
