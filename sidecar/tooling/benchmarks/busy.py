"""How busy the engines were during a sale: the mock engines count the seconds they spend
computing steps (`mock:engine_busy_seconds_total`); over the sale's seconds and engines,
that is the GPUs' busy share, so shedding more than the GPUs needed shows as idle GPUs.
Engines that keep no such count (vLLM itself) give no share. And when they are idle
again, so that the next run starts on idle engines."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Sequence

BUSY_METRIC = "mock:engine_busy_seconds_total"


def metric_values(engine_url: str, names: tuple[str, ...]) -> list[float]:
    """The values of an engine's /metrics lines that start with one of `names`."""
    with urllib.request.urlopen(f"{engine_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(names)]


def busy_seconds(engine_urls: Sequence[str]) -> float | None:
    """The engines' busy seconds so far, summed; None if one does not count them."""
    total = 0.0
    for url in engine_urls:
        values = metric_values(url, (BUSY_METRIC,))
        if not values:
            return None
        total += sum(values)
    return total


class BusyShare:
    """The engines' busy share over the `seconds` after start(), read in a thread of its
    own at the end of those seconds (the sale's tail, after them, is left out)."""

    def __init__(self, engine_urls: Sequence[str], seconds: float) -> None:
        self._urls = list(engine_urls)
        self._seconds = seconds
        self._first: float | None = None
        self._span: tuple[float, float] | None = None  # (busy seconds, wall seconds)
        self._thread = threading.Thread(target=self._read_at_the_end, daemon=True)

    def start(self) -> BusyShare:
        self._started = time.monotonic()
        self._first = busy_seconds(self._urls)
        self._thread.start()
        return self

    def _read_at_the_end(self) -> None:
        time.sleep(max(0.0, self._started + self._seconds - time.monotonic()))
        last = busy_seconds(self._urls)
        if self._first is not None and last is not None:
            self._span = (last - self._first, time.monotonic() - self._started)

    def share(self) -> float | None:
        """Busy seconds per engine and wall second, 0 to 1; None when not counted."""
        self._thread.join()
        if self._span is None or not self._urls:
            return None
        busy, wall = self._span
        return busy / (wall * len(self._urls))


def wait_until_idle(engine_urls: Sequence[str], within: float = 120.0) -> None:
    """Until no engine runs or queues anything: the next run starts on idle engines."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(_requests_on(url) == 0 for url in engine_urls):
            return
        time.sleep(0.2)
    raise SystemExit("the engines did not drain between the runs")


def _requests_on(engine_url: str) -> float:
    running = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    return sum(metric_values(engine_url, running))
