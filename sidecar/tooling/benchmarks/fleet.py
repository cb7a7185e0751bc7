"""The GPUs a flash sale runs on: the mock's simulated ones, or vLLM's CPU build.

Resolved once when the bench starts into a `Fleet`: the engines Envoy fronts (none: the
stack starts mocks), the traffic mix as they can hold it, and how many requests of that
mix a second one pool of them serves, which the sale's load and its budgets are figured
from. The mock's capacity is its configured prefill rate; a real engine's is measured,
by keeping it full of the mix for a while and counting what it finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from sidecar.tooling.benchmarks.load import SERVED, send
from sidecar.tooling.benchmarks.traffic import (
    CALLERS,
    Caller,
    PlannedRequest,
    capacity_rps,
    mean_prompt_tokens,
    plan,
)
from sidecar.tooling.engine import vllm
from sidecar.tooling.stack.stack import RunningEngines

MOCK_PREFILL_TOKENS_PER_SECOND = 16_384.0  # the mock's default, per replica
# The real engine: long enough for the sale's longest document, scaled (see scale_for).
ENGINE_SETTINGS = vllm.EngineSettings(max_model_len=4096, max_num_seqs=4, prefix_caching=False)
# Tokens kept free of the prompt in each sequence: the chat template's and the answer's.
TEMPLATE_TOKENS = 32


@dataclass(frozen=True)
class Fleet:
    name: str  # what the sale runs on, in a few words: "2 mock GPUs"
    detail: str  # how they serve it
    callers: tuple[Caller, ...]  # the mix, its prompts scaled to fit the engines
    capacity_rps: float  # requests a second of this mix one pool serves
    engines: RunningEngines | None = None  # None: the stack starts mocks
    prompt_scale: int = 1  # the mix's prompts are this many times shorter

    @property
    def description(self) -> str:
        return f"{self.name} ({self.detail})"

    @property
    def capacity_tokens_per_second(self) -> float:
        """The capacity in prompt tokens a second: what the budgets are made of."""
        return self.capacity_rps * mean_prompt_tokens(self.callers)

    @property
    def stack_overrides(self) -> dict[str, object]:
        """How a stack fronting these engines learns their load."""
        if self.engines is None:
            return {}
        return {"engines": self.engines, "report_interval": vllm.STACK_REPORT_INTERVAL}

    @property
    def sidecar_args(self) -> tuple[str, ...]:
        return () if self.engines is None else vllm.STACK_SIDECAR_ARGS


def mocks(replicas: int, time_scale: float, chunked: bool) -> Fleet:
    prefill = replicas * MOCK_PREFILL_TOKENS_PER_SECOND / time_scale
    how = "chunked" if chunked else "whole (unchunked)"
    return Fleet(
        f"{replicas} mock GPUs",
        f"prefilling {prefill:,.0f} tokens/s, prompts {how}",
        CALLERS,
        capacity_rps(prefill),
    )


def scale_for(max_model_len: int, callers: tuple[Caller, ...] = CALLERS) -> int:
    """How many times shorter the prompts must be for the longest, with its answer, to fit
    one sequence of the engine."""
    longest = max(max(c.prompt_range[1], c.very_long_range[1]) for c in callers)
    room = max_model_len - max(c.max_tokens for c in callers) - TEMPLATE_TOKENS
    return max(1, math.ceil(longest / room))


def scaled(callers: tuple[Caller, ...], factor: int) -> tuple[Caller, ...]:
    """The mix with every prompt `factor` times shorter; shares and answers unchanged."""

    def shorter(tokens: int) -> int:
        return max(1, round(tokens / factor))

    return tuple(
        dataclasses.replace(
            caller,
            prompt_median=shorter(caller.prompt_median),
            prompt_range=(shorter(caller.prompt_range[0]), shorter(caller.prompt_range[1])),
            very_long_range=(
                shorter(caller.very_long_range[0]),
                shorter(caller.very_long_range[1]),
            ),
        )
        for caller in callers
    )


def real_engines(
    replicas: int,
    work_dir: Path,
    started: contextlib.ExitStack,
    measure_seconds: float,
    seats: int = ENGINE_SETTINGS.max_num_seqs,
) -> Fleet:
    """vLLM engines serving the tiny model with `seats` sequences each, ready (stopped
    when `started` closes), and what they serve of the scaled mix, measured."""
    engine = dataclasses.replace(ENGINE_SETTINGS, max_num_seqs=seats)
    factor = scale_for(engine.max_model_len)
    callers = scaled(CALLERS, factor)
    urls = []
    for index in range(replicas):
        print(f"starting vLLM {index + 1} of {replicas} (model: {vllm.model()}) ...", flush=True)
        url, _process = started.enter_context(
            vllm.serving(engine, work_dir, name=f"vllm-{index + 1}")
        )
        urls.append(url)
    print(f"measuring what they serve of the mix, for {measure_seconds:g} s ...", flush=True)
    capacity = asyncio.run(served_per_second(urls, callers, measure_seconds, seats))
    print(f"they serve {capacity:.2f} requests/s of the mix", flush=True)
    return Fleet(
        f"{replicas} vLLM CPU engine{'s' if replicas > 1 else ''}",
        f"{seats} sequences each, prompts {factor}x shorter",
        callers,
        capacity,
        RunningEngines(tuple(urls), engine.scheduling_policy),
        factor,
    )


async def served_per_second(
    urls: list[str], callers: tuple[Caller, ...], seconds: float, seats: int
) -> float:
    """Requests a second the engines finish when kept full of the mix: each engine has
    twice as many requests in flight as it runs at once, so it never waits for work. What
    finishes in the first fifth of the time (filling them) or after it is not counted."""
    in_flight = 2 * seats
    requests = plan(100.0, 1000.0, seed=1, callers=callers)  # drawn from, in order
    finished: list[float] = []
    started = time.monotonic()
    counted_from = started + seconds / 5
    deadline = started + seconds
    timeout = aiohttp.ClientTimeout(total=max(60.0, 2 * seconds))

    async def keep_full(url: str, mine: list[PlannedRequest]) -> None:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for request in mine:
                if time.monotonic() >= deadline:
                    return
                outcome = await send(session, url, request, time.monotonic())
                if outcome.result != SERVED:
                    raise RuntimeError(f"the engine at {url} failed a request: {outcome.detail}")
                finished.append(time.monotonic())

    lanes = [url for url in urls for _ in range(in_flight)]
    await asyncio.gather(
        *(keep_full(url, requests[index :: len(lanes)]) for index, url in enumerate(lanes))
    )
    counted = sum(counted_from <= at <= deadline for at in finished)
    return counted / (deadline - counted_from)
