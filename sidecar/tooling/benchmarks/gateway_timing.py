"""Envoy's own timing of the answers the sidecar gave instead of a GPU.

The flash sale's QoS gateway gets a file access log beside its shipped config: for each
request, the tier and decision the sidecar's answer named, and the time from the
request's first byte in to the answer's last byte out as Envoy saw it. That is the
gateway's share of a shed, without the load generator's own delays in reading it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sidecar.tooling.benchmarks.report import TIERS, percentile
from sidecar.tooling.stack import envoy_config

LOG_FORMAT = "%RESP(x-qos-tier)% %RESP(x-qos-decision)% %COMMON_DURATION(DS_RX_BEG:DS_TX_END:us)%\n"


def with_shed_log(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """A copy of `config` that also logs every exchange to `path` in LOG_FORMAT."""
    config = copy.deepcopy(config)
    manager = envoy_config.connection_manager(config)
    manager.setdefault("access_log", []).append(
        {
            "name": "envoy.access_loggers.file",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.access_loggers.file.v3."
                "FileAccessLog",
                "path": str(path),
                "log_format": {"text_format_source": {"inline_string": LOG_FORMAT}},
            },
        }
    )
    return config


def shed_times(path: Path) -> dict[str, dict[str, float | None]]:
    """Per tier, the sheds' p50 and p99 in milliseconds as Envoy timed them."""
    seconds: dict[str, list[float]] = {tier: [] for tier in TIERS}
    for line in path.read_text().splitlines():
        tier, decision, micros = line.split(" ")
        if decision != "-" and tier in seconds and micros.isdigit():
            seconds[tier].append(int(micros) / 1e6)
    return {
        tier: {"p50_ms": percentile(values, 50), "p99_ms": percentile(values, 99)}
        for tier, values in seconds.items()
    }
