"""What the schedulers past the sidecar order an admitted request by: the model server's
own, and the endpoint picker's when one runs behind the sidecar. Ours to set from the
decision, never the client's. Pure: no I/O.

The model server. vLLM 0.33 takes scheduling instructions from whoever sends the request:
- the `X-Vllm-Priority` header, an integer that overrides the body's `priority`
  (vllm/entrypoints/generate/base/serving.py, `_get_priority`; a value that is not an
  integer is ignored and the body's counts);
- the `X-data-parallel-rank` header, which pins the request to one data-parallel engine;
- the body's `priority` (lower runs first under `--scheduling-policy priority`; ignored,
  silently, under the default fcfs).

So an admitted request loses every `x-vllm-*` header and `x-data-parallel-rank` a client
sent, and its body's `priority`. With `engine.send_priority` on, the tier's priority goes
in both ways vLLM reads it: the header, which vLLM reads as the final word, and the body,
for releases that predate the header.

The endpoint picker (EPP: llm-d-router's, or the Gateway API Inference Extension's
reference one), when it runs behind the sidecar on the same route, reads the
InferenceObjective the request belongs to (its priority in the EPP's flow control) and
the flow it is shared fairly within. The sidecar sets both from its own decision (the
tier's objective, the tenant), under the names the picker reads (llm-d's, or the older
x-gateway-* ones), so the two queues agree; a client may set neither under any name, nor
the endpoint the EPP names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sidecar.config.base import Tier
from sidecar.config.schema import InferenceExtensionConfig

PRIORITY_HEADER = "x-vllm-priority"
# Read by vLLM from any client, and able to change where or when a request runs.
CONTROL_HEADERS = (PRIORITY_HEADER, "x-data-parallel-rank")
# Any header a later vLLM may read by this prefix is not the client's to send either
# (admission/answer.py strips them).
VLLM_HEADER_PREFIX = "x-vllm-"


@dataclass(frozen=True)
class EngineFields:
    """What goes to the engine: a replacement body (None: the body is fine as it is) and
    headers to set."""

    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def engine_fields(
    body: dict[str, Any] | None,
    changed: bool,
    send_priority: bool,
    tier_priority: int,
    body_priority: bool = True,
) -> EngineFields:
    """The body (`changed`: already rewritten by the guards; None: a body that is not
    JSON, forwarded as it came) and headers that carry the tier's priority when
    `send_priority`, and no priority the client chose. `body_priority`: the API's body
    takes a `priority` (else only the header carries it)."""
    headers = {PRIORITY_HEADER: str(tier_priority)} if send_priority else {}
    if body is None:
        return EngineFields(None, headers)
    if send_priority and body_priority:
        return EngineFields({**body, "priority": tier_priority}, headers)
    if "priority" in body:
        without = {key: value for key, value in body.items() if key != "priority"}
        return EngineFields(without, headers)
    return EngineFields(body if changed else None, headers)


OBJECTIVE_HEADER = "x-llm-d-inference-objective"
FAIRNESS_HEADER = "x-llm-d-inference-fairness-id"
GATEWAY_OBJECTIVE_HEADER = "x-gateway-inference-objective"
GATEWAY_FAIRNESS_HEADER = "x-gateway-inference-fairness-id"
# The objective's and the fairness id's names, by inference_extension.header_names.
HEADER_NAMES = {
    "llm-d": (OBJECTIVE_HEADER, FAIRNESS_HEADER),
    "gateway-api": (GATEWAY_OBJECTIVE_HEADER, GATEWAY_FAIRNESS_HEADER),
}
# Where the EPP sends the request (the gateway routes by it): the EPP's to set.
DESTINATION_HEADER = "x-gateway-destination-endpoint"
# What else llm-d's picker takes from a request (both names of each): the model it
# rewrites the request to (a model other than the one charged) and latency goals it
# schedules by. Never a client's to say behind the sidecar.
PICKER_HINTS = (
    "x-llm-d-model-name-rewrite",
    "x-gateway-model-name-rewrite",
    "x-llm-d-slo-ttft-ms",
    "x-slo-ttft-ms",
    "x-llm-d-slo-tpot-ms",
    "x-slo-tpot-ms",
)
# Stripped from every request a client sends, whether the extension is on or not, under
# every name a picker may read.
CLIENT_MAY_NOT_SEND = (
    *HEADER_NAMES["llm-d"],
    *HEADER_NAMES["gateway-api"],
    DESTINATION_HEADER,
    *PICKER_HINTS,
)


def inference_headers(config: InferenceExtensionConfig, tier: str, tenant: str) -> dict[str, str]:
    if not config.enabled:
        return {}
    objective, fairness = HEADER_NAMES[config.header_names]
    return {objective: config.objectives[Tier(tier)], fairness: tenant}
