"""The flash-sale traffic: who asks what, how long their prompts are, and when.

Three kinds of callers share the GPUs, as in a shop during a promotion: payments and
fraud checks (P0: short prompts, short answers), the shopping assistant (P1: chat with
some history) and batch jobs summarising reviews and catalogues (P2: long prompts, a
tenth of them very long documents). Arrivals are Poisson; the whole plan is fixed by a
seed, so the run with QoS and the run without it get exactly the same requests.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    tier: str
    tenant: str
    api_key: str
    share: float  # of all requests
    prompt_median: int  # prompt tokens, log-normally spread around this
    prompt_spread: float  # sigma of the log-normal
    prompt_range: tuple[int, int]
    max_tokens: int
    very_long_share: float = 0.0  # of this caller's requests: a whole document
    very_long_range: tuple[int, int] = (20_000, 32_000)

    def mean_prompt(self) -> float:
        """Expected prompt tokens (the log-normal's mean, clipped range ignored)."""
        usual = self.prompt_median * math.exp(self.prompt_spread**2 / 2)
        very_long = sum(self.very_long_range) / 2
        return (1 - self.very_long_share) * usual + self.very_long_share * very_long


CALLERS = (
    Caller("p0", "payments", "promo-payments", 0.15, 300, 0.4, (80, 1_200), 48),
    Caller("p1", "assistant", "promo-assistant", 0.45, 900, 0.6, (150, 6_000), 128),
    Caller("p2", "batch", "promo-batch", 0.40, 2_500, 0.5, (500, 12_000), 128, 0.10),
)


@dataclass(frozen=True)
class PlannedRequest:
    at: float  # seconds after the start
    caller: Caller
    prompt_tokens: int
    model: str = "mock-llm"
    pool: str = ""  # the model pool it is meant for ("" without pools)


def mean_prompt_tokens(callers: tuple[Caller, ...] = CALLERS) -> float:
    return sum(c.share * c.mean_prompt() for c in callers)


def capacity_rps(prefill_tokens_per_second: float, callers: tuple[Caller, ...] = CALLERS) -> float:
    """Requests a second the fleet can prefill with this mix (prefill is its bottleneck:
    a decode step serves a whole batch at once)."""
    return prefill_tokens_per_second / mean_prompt_tokens(callers)


def plan(
    rate: float,
    seconds: float,
    seed: int = 0,
    callers: tuple[Caller, ...] = CALLERS,
    model: str = "mock-llm",
    pool: str = "",
) -> list[PlannedRequest]:
    rng = random.Random(seed)
    weights = [c.share for c in callers]
    requests, at = [], rng.expovariate(rate)
    while at < seconds:
        caller = rng.choices(callers, weights)[0]
        requests.append(PlannedRequest(at, caller, draw_prompt_tokens(caller, rng), model, pool))
        at += rng.expovariate(rate)
    return requests


def draw_prompt_tokens(caller: Caller, rng: random.Random) -> int:
    """One of the caller's prompt lengths, drawn from its spread."""
    if rng.random() < caller.very_long_share:
        return rng.randint(*caller.very_long_range)
    low, high = caller.prompt_range
    drawn = rng.lognormvariate(math.log(caller.prompt_median), caller.prompt_spread)
    return max(low, min(high, round(drawn)))


def chat_body(request: PlannedRequest) -> dict:
    """A streamed chat completion whose one message the sidecar and the mock both count
    as `prompt_tokens` tokens (4 characters a token, plus 4 for the message)."""
    return {
        "model": request.model,
        "messages": [{"role": "user", "content": "buy " * max(1, request.prompt_tokens - 4)}],
        "max_tokens": request.caller.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
