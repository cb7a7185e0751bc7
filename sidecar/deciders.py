"""Builds the decider named in the settings, with what it needs to run."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as redis

from sidecar.config.store import ConfigStore
from sidecar.config.watcher import ConfigWatcher
from sidecar.loops.overload.monitor import LoadMonitor
from sidecar.loops.overload.shedding import SheddingState
from sidecar.request.admission.decider import AdmissionDecider
from sidecar.request.admission.identity import IdentityResolver
from sidecar.request.limiter.buckets import Limiter
from sidecar.request.limiter.redis_buckets import RedisTokenBuckets
from sidecar.request.openai_api.prompt import TextCounter, TokenizerCounter, estimate_text_tokens
from sidecar.request.policy.decision import AdmitAll, Decider
from sidecar.request.queueing.queue import AdmissionQueue
from sidecar.settings import SidecarSettings

DECIDERS = ("admission", "admit-all")


def text_counter(settings: SidecarSettings) -> TextCounter:
    if settings.tokenizer_file:
        return TokenizerCounter(Path(settings.tokenizer_file)).count_text
    return estimate_text_tokens


def build_decider(
    settings: SidecarSettings,
    client: redis.Redis,
    watcher: ConfigWatcher,
    monitor: LoadMonitor | None = None,
    queue: AdmissionQueue | None = None,
    limiter: Limiter | None = None,
) -> Decider:
    if settings.decider == "admit-all":
        return AdmitAll()
    if settings.decider == "admission":
        return AdmissionDecider(
            snapshot=lambda: watcher.current,
            identity=IdentityResolver(ConfigStore(client).tenant_for_key_hash),
            limiter=limiter or RedisTokenBuckets(client),
            count_text=text_counter(settings),
            shedding=(lambda: monitor.state) if monitor else SheddingState,
            queue=queue,
            projection=monitor,
        )
    raise SystemExit(f"unknown decider {settings.decider!r}; known: {', '.join(DECIDERS)}")
