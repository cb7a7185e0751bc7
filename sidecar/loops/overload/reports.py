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
from sidecar.loops.overload.load import PodLoad

REPORTS_KEY = "qos:{qos-pods}:reports"
STAMPS_KEY = "qos:{qos-pods}:stamps"
# Entries dead this long are deleted by readers (pods that went away for good).
FORGET_AFTER_MS = 60_000

_SCRIPTS = resources.files("sidecar.loops.overload")
_STORE = _SCRIPTS.joinpath("store_report.lua").read_text()
_READ = _SCRIPTS.joinpath("read_reports.lua").read_text()


class ReportStore:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._store = client.register_script(_STORE)
        self._read = client.register_script(_READ)

    async def put(self, report: load_report_pb2.LoadReport, ttl_seconds: float) -> None:
        await self.put_many([report], ttl_seconds)

    async def put_many(self, reports: list[load_report_pb2.LoadReport], ttl_seconds: float) -> None:
        """Several pods' reports in one call (a scrape of a group's pods)."""
        if not reports:
            return
        args: list[str | bytes | int] = [max(1, round(ttl_seconds * 1000))]
        for report in reports:
            args += [report.pod_id, report.SerializeToString()]
        await self._store(keys=[REPORTS_KEY, STAMPS_KEY], args=args)

    async def fresh(self) -> list[PodLoad]:
        """The reports that still count, by Redis's clock."""
        now_ms, report_pairs, stamp_pairs = await self._read(keys=[REPORTS_KEY, STAMPS_KEY])
        reports, stamps = _as_dict(report_pairs), _as_dict(stamp_pairs)
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
                    kv_cache_usage=None if report.kv_cache_unknown else report.kv_cache_usage,
                    kv_blocks_total=report.kv_blocks_total,
                    running=report.num_requests_running,
                    waiting=report.num_requests_waiting,
                    age_seconds=(now_ms - received_ms) / 1000,
                    scheduling_policy=report.scheduling_policy,
                    model=report.model,
                    pool=report.pool,
                    capacity_tokens_per_second=max(report.capacity_tokens_per_second, 0.0),
                    kv_block_size=report.kv_block_size,
                    admission_rejections=report.admission_rejections,
                )
            )
        if dead:
            await self._redis.hdel(STAMPS_KEY, *dead)
            await self._redis.hdel(REPORTS_KEY, *dead)
        return fresh


def _as_dict(pairs: list[bytes]) -> dict[bytes, bytes]:
    """HGETALL's flat reply inside a script: field, value, field, value, …"""
    return dict(zip(pairs[::2], pairs[1::2], strict=True))
