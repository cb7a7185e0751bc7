"""Pods whose servers refuse work at their own queue limits.

vLLM caps its queue (--max-num-queued-reqs, --max-num-queued-tokens) and answers 503 past
it, counting each refusal in vllm:admission_rejections. Envoy tries such a request once on
another pod; the gateway hears of the refusal from the pod's next report: a count that
rose since the report before marks the pod full for a while (overload.refusal_hold_seconds),
whatever its KV use, so the shedding rules act before every pod refuses. The first report
of a pod marks nothing: its count may be old.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sidecar.loops.overload.load import PodLoad


class RefusingPods:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._counts: dict[str, int] = {}  # each pod's refusals, as last read
        self._until: dict[str, float] = {}  # pods counted as full, until when

    def marked(self, pods: tuple[PodLoad, ...], hold: float) -> tuple[PodLoad, ...]:
        """`pods` with those refusing lately marked so."""
        now = self._clock()
        counts = {pod.pod_id: pod.admission_rejections for pod in pods}
        for pod, count in counts.items():
            before = self._counts.get(pod)
            if before is not None and count > before:
                self._until[pod] = now + hold
        self._counts = counts
        self._until = {pod: end for pod, end in self._until.items() if end > now and pod in counts}
        if not self._until:
            return pods
        return tuple(
            dataclasses.replace(pod, refusing=True) if pod.pod_id in self._until else pod
            for pod in pods
        )
