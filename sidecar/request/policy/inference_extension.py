"""What the endpoint picker (EPP: llm-d-router's, or the Gateway API Inference
Extension's reference one) reads of an admitted request, when it runs behind the sidecar
on the same route: the InferenceObjective the request belongs to (its priority in the
EPP's flow control) and the flow it is shared fairly within. The sidecar sets both from
its own decision (the tier's objective, the tenant), under the names the picker reads
(llm-d's, or the older x-gateway-* ones), so the two queues agree; a client may set
neither under any name, nor the endpoint the EPP names. Pure."""

from __future__ import annotations

from sidecar.config.base import Tier
from sidecar.config.schema import InferenceExtensionConfig

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
