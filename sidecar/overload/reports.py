"""Pods' load reports in Redis, so every sidecar sees every pod.

Reports live in two hashes under the hash tag {qos-pods}: the report itself, and when
Redis received it and until when it counts. Times are Redis's own (TIME), so sidecars
with different clocks agree on which reports are fresh. Readers take a whole view in
one round trip and drop long-dead entries now and then.
"""

from __future__ import annotations

from importlib import resources

import redis.asyncio as redis

from sidecar.generated.qos.v1 import load_report_pb2
from sidecar.overload.load import PodLoad

REPORTS_KEY = "qos:{qos-pods}:reports"
STAMPS_KEY = "qos:{qos-pods}:stamps"
# Entries dead this long are deleted by readers (pods that went away for good).
FORGET_AFTER_MS = 60_000

_STORE = resources.files("sidecar.overload").joinpath("store_report.lua").read_text()


class ReportStore:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._store = client.register_script(_STORE)

    async def put(self, report: load_report_pb2.LoadReport, ttl_seconds: float) -> None:
        await self._store(
            keys=[REPORTS_KEY, STAMPS_KEY],
            args=[report.pod_id, report.SerializeToString(), max(1, round(ttl_seconds * 1000))],
        )

    async def fresh(self) -> list[PodLoad]:
        """The reports that still count, by Redis's clock."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.time().hgetall(REPORTS_KEY).hgetall(STAMPS_KEY)
            (seconds, micros), reports, stamps = await pipe.execute()
        now_ms = seconds * 1000 + micros // 1000
        fresh, dead = [], []
        for pod, stamp in stamps.items():
            received_ms, expires_ms = (int(x) for x in stamp.split())
            if expires_ms <= now_ms:
                if now_ms - expires_ms > FORGET_AFTER_MS:
                    dead.append(pod)
                continue
            raw = reports.get(pod)
            if raw is None:
                continue
            report = load_report_pb2.LoadReport.FromString(raw)
            fresh.append(
                PodLoad(
                    pod_id=report.pod_id,
                    kv_cache_usage=report.kv_cache_usage,
                    kv_blocks_total=report.kv_blocks_total,
                    running=report.num_requests_running,
                    waiting=report.num_requests_waiting,
                    age_seconds=(now_ms - received_ms) / 1000,
                )
            )
        if dead:
            await self._redis.hdel(STAMPS_KEY, *dead)
            await self._redis.hdel(REPORTS_KEY, *dead)
        return fresh
