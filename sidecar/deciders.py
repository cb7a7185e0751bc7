"""Builds the decider named in the settings, with what it needs to run."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as redis

from sidecar.config.store import ConfigStore
from sidecar.config.watcher import ConfigWatcher
from sidecar.loops.overload.monitor import LoadMonitor
from sidecar.loops.overload.shedding import SheddingState
from sidecar.request.admission.director import AdmissionDirector
from sidecar.request.admission.identity import IdentityResolver
from sidecar.request.admission.refunds import Refunds
from sidecar.request.bodies.tokens import estimate
from sidecar.request.counting import PromptCounter
from sidecar.request.limiter.buckets import Limiter
from sidecar.request.policy.decision import AdmitAll, Decider
from sidecar.request.queueing.queue import AdmissionQueue
from sidecar.settings import SidecarSettings

DECIDERS = ("admission", "admit-all")


def prompt_counter(settings: SidecarSettings) -> PromptCounter:
    if settings.tokenizer_file:
        # The exact extra's packages (tokenizers, jinja2) only when a tokenizer is given.
        from sidecar.request.counting.exact import ExactCounter

        template = Path(settings.chat_template_file) if settings.chat_template_file else None
        return ExactCounter(Path(settings.tokenizer_file), template)
    return estimate


def build_decider(
    settings: SidecarSettings,
    client: redis.Redis,
    watcher: ConfigWatcher,
    limiter: Limiter,
    refunds: Refunds,
    monitor: LoadMonitor | None = None,
    queue: AdmissionQueue | None = None,
) -> Decider:
    """`limiter`: the budgets, whose policy for a lost Redis is the only one
    (limiter/resilient.py); `refunds`: budget given back, shared with the exchange ends."""
    if settings.decider == "admit-all":
        return AdmitAll()
    if settings.decider == "admission":
        return AdmissionDirector(
            snapshot=watcher.snapshot,
            identity=IdentityResolver(ConfigStore(client).tenant_for_key_hash),
            limiter=limiter,
            count_prompt=prompt_counter(settings),
            shedding=monitor.shedding if monitor else SheddingState,
            queue=queue,
            projection=monitor,
            refunds=refunds,
        )
    raise SystemExit(f"unknown decider {settings.decider!r}; known: {', '.join(DECIDERS)}")
