"""Ending batch streams early on vLLM itself: how soon the engine lets go of a stream the
gateway ends, and what that does for a payment surge.

One vLLM (its CPU build, the tiny model: 129 KV blocks of 32 tokens, 16 sequences at
once: the memory binds, not the seats) behind the local stack, its load pushed once a
second. Each round runs eviction off and on, one after the other (the order alternating):
three P2 streams (500-token prompts, 3 500 tokens asked) start, and once they hold half of
vLLM's cache a surge of P0 requests (12 at once, 300-token prompts, 16 tokens each,
streamed) arrives: with the P2 streams, more than the cache holds. Each pass starts with
vLLM idle and the gateway shedding nothing. A first pass, not counted, warms the stack.
vLLM schedules by priority (the gateway sends each tier's) or, with --policy fcfs, in
order of arrival. The lines are where vLLM's use passes for seconds on its way up (P1
shed below 45 % free, P2 below 50 %, eviction below 40 %).

Printed per variant: P0 TTFT (send to first token) p50 and p99 over the rounds. And, from
a third pass each round (the three P2 streams alone, eviction on, so that their growth
takes the pool below the line and nothing else moves vLLM's figures), the time from each
of the gateway's decisions to end streams (its log line's time) until vLLM's unfinished
requests fall below their count at the decision (issue-to-abort: vLLM counts a request
its client left in no counter of its own), and until its KV use falls; vLLM's /metrics
is read as often as it answers.

Run: .venv/bin/python bench/eviction.py [--rounds 4] [--surge 12] [--policy priority|fcfs]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import openai

from sidecar.tooling.engine import vllm
from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.stack import RunningEngines, Stack, StackOptions

# The memory binds, not the seats: a surge finds seats but no room in the cache.
ENGINE = vllm.EngineSettings(max_model_len=4_096, max_num_seqs=16, kv_cache_tokens=4_096)
P2_STREAMS, P2_PROMPT, P2_TOKENS = 3, 500, 3_500
P0_PROMPT, P0_TOKENS = 300, 16
KEYS = {"p0": "bench-evict-p0", "p2": "bench-evict-p2"}
LINES = {
    "slo": {"ttft_sample_rate": 0},
    "fleet": {"capacity_tokens_per_second": 10_000_000},  # memory holds P2 back, not budgets
    "tiers": {
        "p0": {"max_prompt_tokens": None},
        "p1": {"shed_below_free_kv": 0.45},
        "p2": {"max_prompt_tokens": None, "shed_below_free_kv": 0.50},
    },
}
EVICT_LINE = 0.40
SURGE_AT_KV_USE = 0.50
POLL_SECONDS = 0.05
DECIDED = "streams ended early for the tiers above"  # the sidecar's log line


@dataclass
class Timeline:
    """What the poller saw of vLLM: (epoch seconds, its unfinished requests, its KV use)."""

    points: list[tuple[float, float, float]] = field(default_factory=list)

    def after(self, decisions: list[float]) -> list[tuple[float, float]]:
        """Per decision to end streams: seconds until vLLM held fewer unfinished requests
        than at the decision, and until its KV use fell (one never followed by both, or
        seen before any look, is left out)."""
        found = []
        for decided in decisions:
            before = [p for p in self.points if p[0] <= decided]
            later = [p for p in self.points if p[0] > decided]
            if not before or decided - before[-1][0] > 1.0:
                continue  # not while the poller looked
            _, unfinished, kv = before[-1]
            dropped = next((p[0] for p in later if p[1] < unfinished), None)
            freed = next((p[0] for p in later if p[2] < kv - 0.02), None)
            if dropped is not None and freed is not None:
                found.append((dropped - decided, freed - decided))
        return found


def engine_figures(url: str) -> tuple[float, float]:
    """vLLM's unfinished requests and its KV use."""
    samples = scrape(f"{url}/metrics")

    def total(*names: str) -> float:
        return sum(v for k, v in samples.items() if k.startswith(names))

    unfinished = total("vllm:num_requests_running{", "vllm:num_requests_waiting{")
    return unfinished, total("vllm:kv_cache_usage_perc{")


def evictions(admin_url: str) -> float:
    samples = scrape(f"{admin_url}/metrics")
    return sum(v for k, v in samples.items() if k.startswith("qos_evictions_total{"))


def shedding(admin_url: str) -> bool:
    """Whether the sidecar sheds a tier now (its projection of the last pass may outlive
    it; and while P1 is shed for the memory, P2 streams would be ended as they begin)."""
    samples = scrape(f"{admin_url}/metrics")
    return any(v for k, v in samples.items() if k.startswith("qos_overload_shedding{"))


def decisions(log: Path) -> list[float]:
    """When the sidecar decided to end streams (epoch seconds, from its log lines)."""
    found = []
    for line in log.read_text().splitlines():
        entry = json.loads(line) if line.startswith("{") else {}
        if entry.get("message") == DECIDED:
            found.append(datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp())
    return found


async def poll(engine_url: str, timeline: Timeline) -> None:
    """vLLM's figures, as often as its /metrics answers."""
    while True:
        unfinished, kv = await asyncio.to_thread(engine_figures, engine_url)
        timeline.points.append((time.time(), unfinished, kv))


def prompt(tokens: int, variant: int) -> list[dict]:
    """About `tokens` tokens (the tiny model's tokenizer makes each "buy " one), each
    variant starting differently so that no two share cached blocks."""
    return [{"role": "user", "content": f"{variant:05d} " + "buy " * tokens}]


async def stream(api: openai.AsyncOpenAI, messages: list[dict], max_tokens: int) -> float:
    """Seconds until the first token; the stream is read to its end."""
    started, first = time.monotonic(), None
    answer = await api.chat.completions.create(
        model=vllm.SERVED_MODEL,
        messages=messages,
        max_tokens=max_tokens,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    async for chunk in answer:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.monotonic() - started
    return first if first is not None else time.monotonic() - started


async def until(check, within: float) -> None:
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(check):
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {within} s: {check}")
        await asyncio.sleep(POLL_SECONDS)


def clients(stack: Stack) -> dict[str, openai.AsyncOpenAI]:
    return {
        tier: openai.AsyncOpenAI(
            base_url=f"{stack.envoy_url}/v1", api_key=key, max_retries=0, timeout=600
        )
        for tier, key in KEYS.items()
    }


async def batch_streams(p2: openai.AsyncOpenAI, seed: int) -> list[asyncio.Task]:
    """The P2 streams, once all three stream."""
    started = [asyncio.Event() for _ in range(P2_STREAMS)]

    async def batch(i: int) -> None:
        answer = await p2.chat.completions.create(
            model=vllm.SERVED_MODEL,
            messages=prompt(P2_PROMPT, 1000 * seed + i),
            max_tokens=P2_TOKENS,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        async for _chunk in answer:
            started[i].set()

    batches = [asyncio.create_task(batch(i)) for i in range(P2_STREAMS)]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 300)
    if any(task.done() for task in batches):
        raise SystemExit("a P2 stream ended as it began: shed, not streamed by vLLM")
    return batches


async def idle(stack: Stack, engine_url: str) -> None:
    """vLLM holds no request, and the gateway sheds no tier."""
    await until(lambda: engine_figures(engine_url)[0] == 0, 300)
    await until(lambda: not shedding(stack.sidecar_admin_url), 60)


async def surge_round(stack: Stack, engine_url: str, surge: int, seed: int) -> list[float]:
    """P0's TTFTs in a surge that arrives once the P2 streams hold half the cache; `seed` makes
    this pass's prompts its own (no pass finds another's in vLLM's prefix cache)."""
    await idle(stack, engine_url)
    apis = clients(stack)
    async with apis["p2"] as p2, apis["p0"] as p0:
        batches = await batch_streams(p2, seed)
        # The surge comes as the P2 streams hold half the cache: with it, more than all.
        await until(lambda: engine_figures(engine_url)[1] >= SURGE_AT_KV_USE, 300)
        payments = [
            stream(p0, prompt(P0_PROMPT, 1000 * seed + 100 + i), P0_TOKENS) for i in range(surge)
        ]
        ttfts = await asyncio.gather(*payments)
        for task in batches:
            task.cancel()  # what was not ended is not this round's business
        await asyncio.gather(*batches, return_exceptions=True)
    return list(ttfts)


async def letting_go(stack: Stack, engine_url: str, seed: int, timeline: Timeline) -> None:
    """The P2 streams alone, eviction on, followed until the gateway ended them all."""
    await idle(stack, engine_url)
    apis = clients(stack)
    async with apis["p2"] as p2:
        poller = asyncio.create_task(poll(engine_url, timeline))
        batches = await batch_streams(p2, seed)
        await asyncio.wait(batches, timeout=120)
        for task in batches:
            task.cancel()
        await asyncio.gather(*batches, return_exceptions=True)
        await asyncio.sleep(1.0)  # the poller sees the last ends' falls
        poller.cancel()


def stack_options(work: Path, engine_url: str, policy: str) -> StackOptions:
    return StackOptions.on_free_ports(
        work,
        engines=RunningEngines((engine_url,), policy),
        replicas=1,
        load_source="push",
        envoy_concurrency=1,
        report_interval=vllm.STACK_REPORT_INTERVAL,
        sidecar_args=vllm.STACK_SIDECAR_ARGS,
    )


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--surge", type=int, default=12)
    parser.add_argument("--policy", choices=("priority", "fcfs"), default="priority")
    args = parser.parse_args()
    engine = dataclasses.replace(ENGINE, scheduling_policy=args.policy)
    lines = {**LINES, "engine": {"send_priority": args.policy == "priority"}}
    ttfts: dict[str, list[float]] = {"off": [], "on": []}
    timeline = Timeline()
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as running:
        work = Path(tmp)
        engine_url, _ = running.enter_context(vllm.serving(engine, work / "engine"))
        options = stack_options(work / "stack", engine_url, args.policy)
        stack = running.enter_context(Stack(options))
        overload = options.base_config()["overload"]
        for tier, key in KEYS.items():
            stack.config.tenant(f"bench-{tier}", tier, key)
        stack.config.set({**lines, "overload": {**overload, "evict_below_free_kv": None}})
        asyncio.run(surge_round(stack, engine_url, args.surge, 99))  # warming up
        for round_no in range(args.rounds):
            order = ("off", "on") if round_no % 2 == 0 else ("on", "off")
            for variant in order:
                line = EVICT_LINE if variant == "on" else None
                stack.config.set({**lines, "overload": {**overload, "evict_below_free_kv": line}})
                seed = 3 * round_no + order.index(variant)
                ended = evictions(stack.sidecar_admin_url)
                figures = asyncio.run(surge_round(stack, engine_url, args.surge, seed))
                ended = evictions(stack.sidecar_admin_url) - ended
                ttfts[variant] += figures
                print(
                    f"round {round_no + 1} eviction {variant}: P0 TTFT p50 "
                    f"{statistics.median(figures) * 1000:.0f} ms, "
                    f"max {max(figures) * 1000:.0f} ms; P2 streams ended {ended:.0f}",
                    flush=True,
                )
            stack.config.set({**lines, "overload": {**overload, "evict_below_free_kv": EVICT_LINE}})
            asyncio.run(letting_go(stack, engine_url, 3 * round_no + 2, timeline))
        decided = decisions(stack.process("sidecar").log_path)
        print(f"decisions to end streams: {len(decided)}; looks at vLLM: {len(timeline.points)}")
    print(f"\nP0 surges of {args.surge}, {args.rounds} rounds ({len(ttfts['on'])} requests each)")
    for variant, values in ttfts.items():
        print(
            f"  eviction {variant:>3}: TTFT p50 {statistics.median(values) * 1000:6.0f} ms, "
            f"p99 {quantile(values, 0.99) * 1000:6.0f} ms"
        )
    falls = timeline.after(decided)
    if falls:
        aborts, kv = [a for a, _ in falls], [k for _, k in falls]
        print(f"  {len(falls)} decisions to end streams; from each until")
        for what, seconds in (("vLLM's unfinished requests fell", aborts), ("its KV use fell", kv)):
            print(
                f"    {what}: median {statistics.median(seconds) * 1000:.0f} ms, "
                f"max {max(seconds) * 1000:.0f} ms"
            )
    else:
        print("  no eviction was seen followed by vLLM letting go")


if __name__ == "__main__":
    main()
