"""A pod's load report, as the sidecar takes it, from its model server's `/metrics`."""

from __future__ import annotations

import time

from sidecar.generated.qos.v1 import load_report_pb2
from sidecar.loops import dialects


def load_report(
    text: str, pod_id: str, scheduling_policy: str = "", dialect: str = ""
) -> load_report_pb2.LoadReport:
    """A load report from a model server's Prometheus text, in its dialect (found from
    the text when not given: sidecar/loops/dialects/)."""
    pod = dialects.read(text, dialect)
    return load_report_pb2.LoadReport(
        pod_id=pod_id,
        model=pod.model,
        kv_cache_usage=pod.kv_usage or 0.0,
        kv_cache_unknown=pod.kv_usage is None,
        kv_blocks_total=pod.kv_blocks_total,
        kv_block_size=pod.kv_block_size,
        num_requests_running=pod.running,
        num_requests_waiting=pod.waiting,
        observed_unix_ms=int(time.time() * 1000),
        scheduling_policy=scheduling_policy,
        dialect=pod.dialect,
        admission_rejections=pod.admission_rejections,
    )
