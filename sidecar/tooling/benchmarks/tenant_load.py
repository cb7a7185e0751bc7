"""Tenants of one tier, each offering a steady load through a gateway, and what each got.

An open schedule: every request leaves at its planned time, whatever happened to the ones
before it, so a tenant kept waiting cannot slow its own offer down. Used by the fairness
tests and `bench/fairness.py`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass

import aiohttp

from sidecar.tooling.benchmarks.prompt_estimate import estimate_prompt_tokens


def chat(tokens: int, max_tokens: int = 4) -> dict:
    """A chat whose prompt costs `tokens` budget tokens (the sidecar's estimate)."""
    body = {
        "messages": [{"role": "user", "content": "x" * 4 * max(1, tokens - 4)}],
        "max_tokens": max_tokens,
    }
    assert estimate_prompt_tokens(body) == tokens, tokens
    return body


@dataclass(frozen=True)
class TenantLoad:
    tenant: str
    api_key: str
    url: str  # the gateway it goes through
    tokens_per_second: float  # offered, in budget tokens
    body: dict

    @property
    def cost(self) -> int:
        return estimate_prompt_tokens(self.body)


@dataclass(frozen=True)
class Answer:
    tenant: str
    served: bool  # answered by the GPU (not a fallback, not an error)
    latency: float  # seconds from sending to the whole answer
    done_at: float  # seconds after the offer started
    cost: int


async def offer(loads: list[TenantLoad], seconds: float) -> list[Answer]:
    answers: list[Answer] = []
    started = time.monotonic()

    async def one(session: aiohttp.ClientSession, load: TenantLoad, at: float) -> None:
        await asyncio.sleep(max(0.0, started + at - time.monotonic()))
        sent = time.monotonic()
        headers = {"Authorization": f"Bearer {load.api_key}"}
        async with session.post(
            f"{load.url}/v1/chat/completions", json=load.body, headers=headers
        ) as response:
            await response.read()
            served = response.status == 200 and "x-qos-decision" not in response.headers
        now = time.monotonic()
        answers.append(Answer(load.tenant, served, now - sent, now - started, load.cost))

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = []
        for load in loads:
            per_second = load.tokens_per_second / load.cost
            tasks += [one(session, load, i / per_second) for i in range(int(per_second * seconds))]
        await asyncio.gather(*tasks)
    return answers


def of(answers: list[Answer], tenant: str) -> list[Answer]:
    return [a for a in answers if a.tenant == tenant]


def served_share(answers: list[Answer]) -> float:
    return sum(a.served for a in answers) / len(answers) if answers else 0.0


def median_latency(answers: list[Answer]) -> float | None:
    served = [a.latency for a in answers if a.served]
    return statistics.median(served) if served else None


def tokens_served_between(answers: list[Answer], start: float, end: float) -> float:
    """Budget tokens of the answers served that ended in [start, end)."""
    return sum(a.cost for a in answers if a.served and start <= a.done_at < end)
