"""What the history recorder and the dashboard read of the running gateway: its parts,
not the server that wires them."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter

from sidecar.config.store import ConfigStore
from sidecar.config.watcher import ConfigWatcher
from sidecar.loops.overload.monitor import LoadMonitor
from sidecar.loops.slo.controller import SloController
from sidecar.request.queueing.queue import AdmissionQueue


@dataclass(frozen=True)
class GatewayView:
    watcher: ConfigWatcher  # the configuration in force
    config_store: ConfigStore  # the operator's switches and the controller's moves
    decisions: Counter  # qos_decisions_total, by tier, outcome, reason and pool
    monitor: LoadMonitor  # the pools' load and shedding
    queue: AdmissionQueue  # slots in flight, requests waiting
    controller: SloController  # compliance, and whether this sidecar leads
    # qos_overflow_requests_total, by the pool that shed, the pool that took, and tier
    overflowed: Counter | None = None
