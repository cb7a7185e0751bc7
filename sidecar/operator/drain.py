"""`qos-sidecar drain-envoy`: the gateway pod's leaving, run as the sidecar container's
preStop hook, so that a rollout cuts no answer.

Envoy alone exits at once on SIGTERM, cutting every stream, and the sidecar must outlive
every exchange Envoy still carries (each holds an ext_proc stream, and its end comes back
on the access log). So, in order:

1. wait while the pod's removal from its Services reaches the proxies and load balancers
   in front (new connections still served);
2. tell Envoy to drain (its admin API, on loopback): its listeners close, so new
   connections are refused, and its open connections close as their requests end;
3. wait until Envoy holds no request, up to the longest answer a tier allows;
4. say so in the state directory, where Envoy's own preStop hook waits for it: Envoy is
   then signalled with nothing left to cut, and this hook ends, so the sidecar is
   signalled last and drains what remains of its own streams (`serve --drain-seconds`).

The pod's terminationGracePeriodSeconds covers all of it.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from sidecar import logs
from sidecar.config.state_dir import StateDir
from sidecar.options import setting

log = logging.getLogger(__name__)

# Envoy's requests in flight on its client listener (envoy.yaml's stat_prefix).
IN_FLIGHT_STAT = "http.llm_ingress.downstream_rq_active"
POLL_SECONDS = 0.5


@dataclass(frozen=True)
class Settings:
    envoy_admin: str = setting(
        "http://127.0.0.1:9901", "QOS_ENVOY_ADMIN", "Envoy's admin API (on the pod's loopback)"
    )
    propagation_seconds: float = setting(
        5.0,
        "QOS_DRAIN_PROPAGATION_SECONDS",
        "how long new connections are still served, while the pod's removal from its "
        "Services reaches whatever sends it traffic",
    )
    longest_answer_seconds: float = setting(
        300.0,
        "QOS_LONGEST_ANSWER_SECONDS",
        "how long Envoy's requests in flight may take to end after the drain starts: the "
        "longest answer a tier allows (the pod's grace period must cover it)",
    )
    state_dir: str = setting(
        "",
        "QOS_STATE_DIR",
        "the sidecar's state directory, shared with Envoy (see serve --state-dir)",
    )
    log_level: str = setting("INFO", "QOS_LOG_LEVEL", "log level")


def main(settings: Settings) -> int:
    logs.configure(settings.log_level, "drain-envoy")
    state = StateDir.resolve(settings.state_dir)
    try:
        time.sleep(settings.propagation_seconds)  # the pod is leaving the Services
        if _post(settings.envoy_admin, "/drain_listeners"):
            log.info("Envoy draining: its listeners are closed")
            left = _wait_until_idle(settings.envoy_admin, settings.longest_answer_seconds)
            if left:
                log.warning("Envoy still holds %d requests: they are cut", left)
        else:
            log.warning("Envoy's admin API did not answer: nothing to drain there")
    finally:
        state.envoy_drained.touch()  # Envoy's preStop ends: it may be signalled
    return 0


def _wait_until_idle(admin: str, seconds: float) -> int:
    """Envoy's requests in flight once they are none, or when `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while True:
        held = _in_flight(admin)
        if not held:  # none, or Envoy gone
            return 0
        if time.monotonic() >= deadline:
            return held
        time.sleep(POLL_SECONDS)


def _in_flight(admin: str) -> int | None:
    """Envoy's requests in flight; None once Envoy is gone (its admin port refuses). A
    busy Envoy that does not answer in time counts as holding some still."""
    url = f"{admin}/stats?format=json&filter=^{IN_FLIGHT_STAT}$"
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            stats = json.load(response)["stats"]
    except (urllib.error.URLError, OSError, ValueError, KeyError) as error:
        reason = getattr(error, "reason", error)
        return None if isinstance(reason, ConnectionRefusedError) else 1
    return int(sum(stat.get("value", 0) for stat in stats if stat.get("name") == IN_FLIGHT_STAT))


def _post(admin: str, path: str) -> bool:
    request = urllib.request.Request(f"{admin}{path}", data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False
