"""Whether the engines honour the priority the sidecar sends. Pure: no I/O.

vLLM under its default scheduling policy, fcfs, accepts a request's priority and ignores
it without a word (0.33). Nor does it say which policy it runs anywhere a sidecar can read
in production: not in /metrics (vllm:cache_config_info carries the cache configuration
only), and /server_info, which has it, exists only in vLLM's development mode. So each
pod's report carries what its reporter was told (`report --scheduling-policy`), and with
`engine.send_priority` on every pod that does not report "priority" is named.
"""

from __future__ import annotations

from collections.abc import Iterable

from sidecar.loops.overload.load import PodLoad

UNKNOWN = "unknown"


def priority_unconfirmed(pods: Iterable[PodLoad], send_priority: bool) -> dict[str, list[str]]:
    """Pods not known to schedule by priority, by what they report ("fcfs": the priority
    is ignored; "unknown": not said); empty when the sidecar sends no priority."""
    if not send_priority:
        return {}
    unconfirmed: dict[str, list[str]] = {}
    for pod in pods:
        if pod.scheduling_policy != "priority":
            unconfirmed.setdefault(pod.scheduling_policy or UNKNOWN, []).append(pod.pod_id)
    return unconfirmed
