"""The answers to Envoy built from a decision: what an admission changes, what a
refusal answers."""

from __future__ import annotations

from sidecar.refusals import Reason
from sidecar.request.extproc.messages import admit_message, immediate_message
from sidecar.request.policy.decision import Respond, Upstream


def _set(mutation) -> dict[str, str]:
    return {option.header.key: option.header.raw_value.decode() for option in mutation.set_headers}


def test_an_admission_that_changes_nothing_still_answers_its_phase():
    message = admit_message("request_headers", Upstream({}, (), None, False))
    assert message.WhichOneof("response") == "request_headers"
    assert message.request_headers.HasField("response")
    assert not message.request_headers.response.HasField("header_mutation")


def test_tags_stripped_headers_and_a_new_body_with_its_length():
    upstream = Upstream({"x-qos-tier": "p1"}, ("x-qos-slot", "x-vllm-priority"), b'{"a":1}', True)
    common = admit_message("request_body", upstream).request_body.response
    mutation = common.header_mutation
    assert _set(mutation) == {"x-qos-tier": "p1", "content-length": "7"}
    assert all(o.append_action == o.OVERWRITE_IF_EXISTS_OR_ADD for o in mutation.set_headers)
    assert list(mutation.remove_headers) == ["x-qos-slot", "x-vllm-priority"]
    assert common.body_mutation.body == b'{"a":1}' and common.clear_route_cache
    assert upstream.set_headers == {"x-qos-tier": "p1"}  # the decision's own is untouched


def test_the_slot_goes_in_the_exchange_metadata_not_in_a_header():
    upstream = Upstream({"x-qos-tier": "p1"}, (), None, False, slot="a1w0-7-9f3c")
    message = admit_message("request_body", upstream)
    exchange = message.dynamic_metadata.fields["qos.exchange"].struct_value
    assert exchange.fields["slot"].string_value == "a1w0-7-9f3c"
    assert "x-qos-slot" not in _set(message.request_body.response.header_mutation)
    without = admit_message("request_body", Upstream({"x-qos-tier": "p1"}))
    assert not without.HasField("dynamic_metadata")


def test_a_refusal_answers_with_its_status_headers_and_body():
    reason = Reason.SHED_TIER_BUDGET
    respond = Respond(status=429, headers={"retry-after": "2"}, body=b"{}", reason=reason)
    answer = immediate_message(respond).immediate_response
    assert answer.status.code == 429 and answer.body == b"{}"
    assert _set(answer.headers) == {"retry-after": "2"}
    assert answer.details == f"qos_{reason}"
