"""Images are not free: a tenant that sends only image parts is held to its rate in the
tokens its answers' usage says they cost, though each was admitted at the configured
estimate (media.image_tokens 1024 against the model's 576) and settled afterwards."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from tests.integration.helpers import stack_with_tenants

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY = "media-key"
RATE = 3000.0  # the tenant's tokens a second
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
BODY = {
    "model": "mock-llm",
    "messages": [{"role": "user", "content": [IMAGE]}],
    "max_tokens": 4,
}
SECONDS, WINDOW = 9.0, (3.0, 9.0)


async def test_an_image_only_tenant_is_held_to_its_rate_by_the_images_real_cost(tmp_path):
    with stack_with_tenants(tmp_path, {}, replicas=1) as stack:
        stack.config.tenant("viewer", "p1", KEY, rate_tokens_per_second=RATE, burst_seconds=1.0)
        served: list[tuple[float, int]] = []  # (seconds into the offer, prompt tokens)
        refused = 0
        started = time.monotonic()

        async def one(session: aiohttp.ClientSession, at: float) -> None:
            nonlocal refused
            await asyncio.sleep(max(0.0, started + at - time.monotonic()))
            async with session.post(
                f"{stack.envoy_url}/v1/chat/completions",
                json=BODY,
                headers={"Authorization": f"Bearer {KEY}"},
            ) as response:
                answer = await response.json()
                if response.status == 200 and "x-qos-decision" not in response.headers:
                    served.append((time.monotonic() - started, answer["usage"]["prompt_tokens"]))
                else:
                    assert response.headers["x-qos-decision"] == "tenant_rate_limited"
                    refused += 1

        per_second = 2 * RATE / 580  # twice what the rate serves of the images' real cost
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(
                *(one(session, i / per_second) for i in range(int(per_second * SECONDS)))
            )
        real = served[0][1]
        assert real < 1024  # the model took fewer tokens than the estimate admitted
        in_window = sum(tokens for at, tokens in served if WINDOW[0] <= at < WINDOW[1])
        rate = in_window / (WINDOW[1] - WINDOW[0])
        assert abs(rate - RATE) / RATE <= 0.15, (rate, len(served), refused)
        assert refused > 0  # the offer was over the rate
