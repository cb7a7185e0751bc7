"""Overflow through real Envoy and the official openai client: a P1 request its pool sheds
for load is answered by the other pool's model, and says so; a client that refuses a
substitute, and a prompt the other model cannot take, get the fallback as before."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from sidecar.request.admission.candidates import OVERFLOW_HEADER, SUBSTITUTE_HEADER
from tests.integration.helpers import stack_with_tenants, wait_until
from tests.integration.test_queueing_through_envoy import sidecar_gauges

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEYS = {"p1": "overflow-p1"}
FALLBACK = "We are serving many users right now."
# Pool B's model takes 1 000 tokens of context: more than a long prompt.
POOL_B_CONTEXT = 1_000


@pytest.fixture(scope="module")
def overflow_stack(tmp_path_factory):
    """Pools pool-a (model-a) and pool-b (model-b) of one mock GPU each; pool-a sheds P1
    while more than a tenth of its 4 slots are taken, and its P1 overflows to pool-b."""
    with stack_with_tenants(
        tmp_path_factory.mktemp("overflow-stack"),
        {f"overflow-{tier}": (tier, key) for tier, key in KEYS.items()},
        pools=2,
        replicas=1,
    ) as stack:
        stack.config.set(
            {
                "pools": {
                    "pool-a": {
                        "models": ["model-a", "mock-llm"],
                        "max_concurrency": 4,
                        "tiers": {"p1": {"shed_above_inflight": 0.1, "overflow": ["pool-b"]}},
                    },
                    "pool-b": {"models": ["model-b"], "max_model_len": POOL_B_CONTEXT},
                }
            }
        )
        yield stack


@contextlib.asynccontextmanager
async def pool_a_busy(stack):
    """A long P1 stream (its tier caps no answer) holds one of pool-a's slots until the
    block ends."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{stack.envoy_url}/v1/chat/completions",
            json={
                "model": "model-a",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 20_000,
                "ignore_eos": True,
                "stream": True,
            },
            headers={"Authorization": f"Bearer {KEYS['p1']}"},
        ) as holder,
    ):
        assert "x-qos-decision" not in holder.headers
        await holder.content.readline()
        yield
    await wait_until(lambda: sidecar_gauges(stack)[0] == 0, what="pool-a's slot given back")


async def ask(client: AsyncOpenAI, words: int = 1, substitute: str | None = None):
    """(the answer's model, its text, the response headers) of a P1 request for model-a."""
    headers = {} if substitute is None else {SUBSTITUTE_HEADER: substitute}
    raw = await client.chat.completions.with_raw_response.create(
        model="model-a",
        messages=[{"role": "user", "content": " ".join(["word"] * words)}],
        max_tokens=3,
        extra_headers=headers,
    )
    completion = raw.parse()
    return completion.model, completion.choices[0].message.content, raw.headers


async def answered(client: AsyncOpenAI, wanted, within: float = 10.0) -> tuple[str, dict]:
    """Asked until the answer's model and headers are as `wanted` (pool-a's shedding
    follows its load a report or two later)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        model, _, headers = await ask(client)
        if wanted(model, headers):
            return model, headers
        await asyncio.sleep(0.05)
    raise AssertionError(f"no answer as wanted within {within} s: {model} {dict(headers)}")


async def test_a_p1_request_shed_in_its_pool_is_answered_by_the_other_pools_model(
    overflow_stack,
):
    client = AsyncOpenAI(
        base_url=f"{overflow_stack.envoy_url}/v1", api_key=KEYS["p1"], max_retries=0
    )
    async with client:
        async with pool_a_busy(overflow_stack):
            model, headers = await answered(client, lambda _, seen: OVERFLOW_HEADER in seen)
            assert model == "model-b"  # the model that answered
            assert headers[OVERFLOW_HEADER] == "pool-b; from=pool-a; reason=shed_inflight"
            assert "x-qos-decision" not in headers  # served, not shed
            # The duty team's page says who serves pool-a's P1 now.
            moved = {"pool": "pool-a", "tier": "p1", "to": "pool-b", "model": "model-b"}
            await wait_until(
                lambda: any(moved.items() <= told.items() for told in happening(overflow_stack)),
                what="the page naming pool-b's model for pool-a's P1",
            )
            # A client that wants model-a or nothing gets the fallback.
            model, text, headers = await ask(client, substitute="no")
            assert headers.get("x-qos-decision") == "shed_inflight", (model, dict(headers))
            assert text.startswith(FALLBACK)
            assert OVERFLOW_HEADER not in headers
            # A prompt longer than pool-b's model takes gets the fallback too.
            model, text, headers = await ask(client, words=POOL_B_CONTEXT + 200)
            assert headers["x-qos-decision"] == "shed_inflight" and text.startswith(FALLBACK)
            # A value that is neither yes nor no is refused in the API's shape.
            with pytest.raises(openai.BadRequestError, match=SUBSTITUTE_HEADER):
                await ask(client, substitute="maybe")
        # Pool-a free again: its own model answers, as without overflow.
        model, headers = await answered(client, lambda model, headers: model == "model-a")
        assert OVERFLOW_HEADER not in headers


def happening(stack) -> list[dict]:
    """The overflows the dashboard's "what is happening" line tells."""
    request = urllib.request.Request(
        f"{stack.sidecar_admin_url}/dashboard/api/history",
        headers={"Authorization": f"Bearer {stack.admin_token}"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())["happening"]["overflow"]
