"""The LoadReporter gRPC service: pods (or reporters beside them) push their load here."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import grpc
import redis.asyncio as redis

from sidecar import redis_errors
from sidecar.config.snapshot import Snapshot
from sidecar.generated.qos.v1 import load_report_pb2, load_report_pb2_grpc
from sidecar.loops.overload import report_auth
from sidecar.loops.overload.reports import ReportStore

log = logging.getLogger(__name__)


class LoadReporterService(load_report_pb2_grpc.LoadReporterServicer):
    """Applies only reports that carry the shared token (report_auth.py) and make sense;
    `refused(reason)` counts every other one."""

    def __init__(
        self,
        store: ReportStore,
        snapshot: Callable[[], Snapshot],
        token: str,
        refused: Callable[[str], None],
    ) -> None:
        self._store = store
        self._snapshot = snapshot
        self._token = token
        self._refused = refused

    async def Report(
        self, request: load_report_pb2.LoadReport, context: grpc.aio.ServicerContext
    ) -> load_report_pb2.ReportAck:
        unproven = report_auth.refusal(self._token, context.invocation_metadata())
        if unproven:
            self._refused("unauthenticated")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, unproven)
        problem = _problem(request)
        if problem:
            self._refused("invalid")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        ttl = self._snapshot().config.overload.report_ttl_seconds
        try:
            await self._store.put(request, ttl)
        except redis.RedisError as error:
            redis_errors.note("load_reports")
            log.warning("load report not stored: %s", error)
            await context.abort(grpc.StatusCode.UNAVAILABLE, "Redis unavailable")
        return load_report_pb2.ReportAck(ttl_ms=round(ttl * 1000))


def _problem(report: load_report_pb2.LoadReport) -> str | None:
    if not report.pod_id or len(report.pod_id) > 253:
        return "pod_id must be 1 to 253 characters"
    usage = report.kv_cache_usage
    if not report.kv_cache_unknown and (math.isnan(usage) or not 0.0 <= usage <= 1.0):
        return "kv_cache_usage must be within 0..1"
    return None
