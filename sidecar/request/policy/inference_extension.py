"""What the Gateway API Inference Extension's endpoint picker (EPP) reads of an admitted
request, when it runs behind the sidecar on the same route: the InferenceObjective the
request belongs to (its priority in the EPP's flow control) and the flow it is shared
fairly within. The sidecar sets both from its own decision (the tier's objective, the
tenant), so the two queues agree; a client may set neither, nor the endpoint the EPP
names. Pure."""

from __future__ import annotations

from sidecar.config.base import Tier
from sidecar.config.schema import InferenceExtensionConfig

OBJECTIVE_HEADER = "x-gateway-inference-objective"
FAIRNESS_HEADER = "x-gateway-inference-fairness-id"
# Where the EPP sends the request (the gateway routes by it): the EPP's to set.
DESTINATION_HEADER = "x-gateway-destination-endpoint"
# Stripped from every request a client sends, whether the extension is on or not.
CLIENT_MAY_NOT_SEND = (OBJECTIVE_HEADER, FAIRNESS_HEADER, DESTINATION_HEADER)


def inference_headers(config: InferenceExtensionConfig, tier: str, tenant: str) -> dict[str, str]:
    if not config.enabled:
        return {}
    return {OBJECTIVE_HEADER: config.objectives[Tier(tier)], FAIRNESS_HEADER: tenant}
