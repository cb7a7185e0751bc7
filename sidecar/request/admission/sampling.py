"""Which exchanges have their response watched, to time their first token: a sample of
them (slo.ttft_sample_rate), at most slo.ttft_samples_per_second."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from sidecar.config.snapshot import Snapshot
from sidecar.request.limiter.buckets import BucketSpec, Owner
from sidecar.request.limiter.resilient import LocalTokenBuckets


class ResponseSampler:
    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        clock: Callable[[], float] = time.monotonic,
        sample: Callable[[], float] = random.random,
    ) -> None:
        self._snapshot = snapshot
        self._sample = sample
        self._budget = LocalTokenBuckets(clock)
        self._bucket = BucketSpec("ttft-samples", 1.0, 1.0, owner=Owner.SAMPLES)

    def watch(self) -> bool:
        slo = self._snapshot().config.slo
        if slo.ttft_sample_rate <= 0 or self._sample() >= slo.ttft_sample_rate:
            return False
        rate = slo.ttft_samples_per_second
        if self._bucket.rate != rate:  # made once per configured rate, not per request
            self._bucket = BucketSpec("ttft-samples", rate, rate, owner=Owner.SAMPLES)
        return self._budget.acquire(1, [self._bucket]).allowed
