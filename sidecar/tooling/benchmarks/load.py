"""Offering a planned load through a gateway on an open schedule, and what each caller saw.

Every request starts at its planned time whatever happened to the ones before (an open
schedule: a slow gateway cannot slow the load down), streams its answer, and is timed
from the moment it was sent: time to first token, time per output token after it, or,
for an answer the gateway gave instead of the GPU, how long that took. How late the
client itself sent each request is kept too (`late`), so a busy client shows.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

from sidecar.tooling.benchmarks.traffic import PlannedRequest, chat_body

SERVED, SHED, ERROR = "served", "shed", "error"
DECISION_HEADER = "x-qos-decision"
TOO_MANY_REQUESTS = 429
OVERFLOW_HEADER = "x-qos-overflow"  # the pool that served a request its own pool shed
# A chunk that carries text (vLLM's role-only first chunk and usage chunk carry none).
CONTENT, EMPTY_CONTENT = b'"content":', b'"content":""'


@dataclass(frozen=True)
class Outcome:
    tier: str
    at: float  # planned start, seconds into the run
    result: str  # served, shed or error
    detail: str  # the sidecar's decision, or what went wrong
    seconds: float  # until the answer was complete (or failed)
    ttft: float | None = None
    tpot: float | None = None
    prompt_tokens: int = 0
    late: float = 0.0  # sent this long after its planned start
    pool: str = ""  # the model pool it was meant for
    served_by: str = ""  # the pool that served it instead, when it overflowed
    retry_after: float | None = None  # a shed's: when it was told to come back, seconds

    @property
    def answered_at(self) -> float:
        """When its answer was complete, seconds into the run."""
        return self.at + self.late + self.seconds


async def offer(
    url: str,
    requests: list[PlannedRequest],
    request_timeout: float,
    on_progress: Callable[[float, list[Outcome], int], None] | None = None,
) -> list[Outcome]:
    """Send every planned request to `url` at its time; what each one got."""
    outcomes: list[Outcome] = []
    connector = aiohttp.TCPConnector(limit=0)
    client_timeout = aiohttp.ClientTimeout(total=request_timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:
        started = time.monotonic()

        async def one(request: PlannedRequest) -> None:
            await asyncio.sleep(max(0.0, started + request.at - time.monotonic()))
            outcomes.append(await send(session, url, request, started + request.at))

        tasks = [asyncio.create_task(one(r)) for r in requests]
        reporter = asyncio.create_task(_report(on_progress, started, outcomes, len(tasks)))
        try:
            await asyncio.gather(*tasks)
        finally:
            reporter.cancel()
    return sorted(outcomes, key=lambda o: o.at)


async def _report(on_progress, started, outcomes, total) -> None:
    if on_progress is None:
        return
    while True:
        await asyncio.sleep(5)
        on_progress(time.monotonic() - started, outcomes, total)


async def send(
    session: aiohttp.ClientSession, url: str, request: PlannedRequest, planned: float
) -> Outcome:
    tier = request.caller.tier
    headers = {
        "Authorization": f"Bearer {request.caller.api_key}",
        "Content-Type": "application/json",
    }
    if request.pool:
        # What routes it without QoS (Envoy's pool route); the QoS gateway drops it and
        # lets the sidecar choose the pool from the model.
        headers["x-qos-pool"] = request.pool
    body = json.dumps(chat_body(request)).encode()  # encoded before the clock starts
    sent = time.monotonic()

    def outcome(
        result: str,
        detail: str,
        ttft: float | None = None,
        tpot: float | None = None,
        served_by: str = "",
        retry_after: float | None = None,
    ) -> Outcome:
        seconds = time.monotonic() - sent
        return Outcome(tier, request.at, result, detail, seconds, ttft, tpot,
                       prompt_tokens=request.prompt_tokens, late=sent - planned,
                       pool=request.pool, served_by=served_by,
                       retry_after=retry_after)  # fmt: skip

    try:
        async with session.post(
            f"{url}/v1/chat/completions", data=body, headers=headers
        ) as response:
            decision = response.headers.get(DECISION_HEADER)
            if decision is not None:  # the gateway answered: a fallback or a refusal
                await response.read()
                return outcome(SHED, decision, retry_after=told_retry_after(response.headers))
            if response.status == TOO_MANY_REQUESTS:  # a peer gateway's limit refused it
                await response.read()
                return outcome(SHED, "429 Too Many Requests")
            if response.status != 200:
                await response.read()
                return outcome(ERROR, f"HTTP {response.status}")
            first, last, tokens, done = await _read_stream(response)
            moved = response.headers.get(OVERFLOW_HEADER, "").partition(";")[0].strip()
    except TimeoutError:
        return outcome(ERROR, "timeout")
    except aiohttp.ClientError as error:
        return outcome(ERROR, type(error).__name__)
    if not done or first is None:
        return outcome(ERROR, "stream cut")
    ttft = first - sent
    tpot = (last - first) / (tokens - 1) if tokens > 1 else None
    return outcome(SERVED, "", ttft=ttft, tpot=tpot, served_by=moved)


def told_retry_after(headers: Mapping[str, str]) -> float | None:
    """When an answer says to come back, in seconds: retry-after-ms (what the official
    clients read first), else Retry-After's seconds."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return float(value) / scale
            except ValueError:
                continue  # an HTTP date: not the gateway's
    return None


async def _read_stream(response: aiohttp.ClientResponse) -> tuple[float | None, float, int, bool]:
    """When the first and last tokens came, how many, and whether [DONE] ended it."""
    first, last, tokens = None, 0.0, 0
    async for line in response.content:
        if not line.startswith(b"data: "):
            continue
        data = line[6:].strip()
        if data == b"[DONE]":
            return first, last, tokens, True
        if CONTENT in data and EMPTY_CONTENT not in data:
            last = time.monotonic()
            first = first if first is not None else last
            tokens += 1
    return first, last, tokens, False
