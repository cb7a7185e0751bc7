"""Model servers' metric dialects: a pod's load read from the /metrics each server speaks.

Each dialect turns one server's Prometheus exposition into a `PodMetrics`; `read` finds
the dialect from the exposition itself (the prefix of its series), or takes the one it
is told. The names, types and labels come from each server's own source, at the release
its fixture under tests/fixtures/metrics/ names.
"""

from __future__ import annotations

from sidecar.loops.dialects.base import MetricsUnreadable, PodMetrics
from sidecar.loops.dialects.registry import DIALECTS, read

__all__ = ["DIALECTS", "MetricsUnreadable", "PodMetrics", "read"]
