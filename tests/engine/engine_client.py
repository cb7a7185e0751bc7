"""What the engine tests read from vLLM directly: its metrics, its token counts."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from sidecar.tooling.engine.vllm import EngineSettings

# Each look at vLLM's /metrics costs its API server (which streams the answers) tens of
# milliseconds of CPU, and up to seconds while it decodes: look no more often than this.
POLL_SECONDS = 0.5


class Engine:
    def __init__(self, url: str, settings: EngineSettings) -> None:
        self.url = url
        self.settings = settings

    def _samples(self) -> list:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as response:
            text = response.read().decode()
        return [s for family in text_string_to_metric_families(text) for s in family.samples]

    def metric(self, name: str, **labels: str) -> float:
        """The sum of `name`'s samples (with these labels) on the engine's /metrics."""
        return _sum(self._samples(), name, labels)

    def kv_usage(self) -> float:
        return self.metric("vllm:kv_cache_usage_perc")

    def requests(self) -> tuple[float, float]:
        """Requests running and waiting (one look at /metrics)."""
        samples = self._samples()
        return _sum(samples, "vllm:num_requests_running"), _sum(
            samples, "vllm:num_requests_waiting"
        )

    def idle(self) -> bool:
        samples = self._samples()
        busy = (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
        )
        return all(_sum(samples, name) == 0 for name in busy)

    async def wait_idle(self, within: float = 120.0) -> None:
        await until(self.idle, within, "idle")

    def tokens(self, messages: list[dict]) -> int:
        """The prompt's tokens, chat template included, as the engine counts them."""
        body = {"model": self.settings.served_model, "messages": messages}
        request = urllib.request.Request(
            f"{self.url}/tokenize",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(json.load(response)["count"])

    def prompt_of(self, tokens: int, variant: int = 0) -> list[dict]:
        """Chat messages of exactly `tokens` tokens; each variant starts differently, so
        that the engine's prefix cache shares none of their blocks. (The tiny model's
        tokenizer makes each "buy " one token.)"""

        def messages(words: int) -> list[dict]:
            return [{"role": "user", "content": f"{variant:05d} " + "buy " * words}]

        words = max(0, tokens - self.tokens(messages(0)))
        for _ in range(4):
            counted = self.tokens(messages(words))
            if counted == tokens:
                return messages(words)
            words = max(0, words + tokens - counted)
        raise AssertionError(f"no prompt of exactly {tokens} tokens (last: {counted})")


async def until(check: Callable[[], bool], within: float, what: str) -> None:
    """Poll the engine (or anything slow) until `check` holds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(POLL_SECONDS)
    raise AssertionError(f"not within {within} s: {what}")


def _sum(samples: list, name: str, labels: dict[str, str] | None = None) -> float:
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items())
    )
