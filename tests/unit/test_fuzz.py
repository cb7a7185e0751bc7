"""Fuzzing with a fixed example budget: whatever a client or an operator sends, the
sidecar answers with a decision or a clear refusal — never an exception."""

from __future__ import annotations

import asyncio

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sidecar.config.base import Tier, describe
from sidecar.config.operator_state import Tenant
from sidecar.config.schema import QosConfig
from sidecar.config.snapshot import Snapshot, hash_api_key
from sidecar.request.admission.director import AdmissionDirector
from sidecar.request.admission.identity import IdentityResolver
from sidecar.request.bodies.tokens import estimate
from sidecar.request.extproc.exchange import Exchange
from sidecar.request.limiter.buckets import Verdict

FUZZ = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3)
    ),
    max_leaves=12,
)
config_keys = st.sampled_from(
    [
        "fleet",
        "tiers",
        "identity",
        "overload",
        "queue",
        "slo",
        "controller",
        "engine",
        "p0",
        "p1",
        "p2",
        "share",
        "weight",
        "sources",
        "targets",
        "floors",
        "bogus",
    ]
)


@FUZZ
@given(
    st.dictionaries(
        config_keys, json_values | st.dictionaries(config_keys, json_values), max_size=4
    )
)
def test_any_config_document_validates_or_is_refused_with_names(document):
    try:
        QosConfig.from_partial(document)
    except ValidationError as error:
        assert describe(error)
    except ValueError as error:
        assert str(error)


class Limiter:
    async def acquire(self, cost, buckets, load=None, otherwise=None):
        return Verdict(True, remaining=1.0)


KEYS = {hash_api_key("k"): "t"}


async def lookup(digest):
    return KEYS.get(digest)


SNAPSHOT = Snapshot(1, QosConfig(), {"t": Tenant(tier=Tier.P1)})
header_names = st.sampled_from(
    [
        ":method",
        ":path",
        "authorization",
        "content-type",
        "x-qos-tier",
        "x-qos-slot",
        "x-tenant-id",
        "X-QoS-Tier",
    ]
) | (st.text(alphabet="abcdefghijklmnopqrstuvwxyz-:", min_size=1, max_size=20))


@FUZZ
@given(
    headers=st.lists(st.tuples(header_names, st.binary(max_size=40)), max_size=8),
    body=st.binary(max_size=200) | st.just(b'{"messages":[{"role":"user","content":"x"}]}'),
)
def test_any_headers_and_body_get_a_decision_never_an_exception(headers, body):
    decider = AdmissionDirector(lambda: SNAPSHOT, IdentityResolver(lookup), Limiter(), estimate)
    failures = []

    class Watching(Exchange):
        async def _ask(self, view, hold):
            try:
                return await self._decider.decide(view, hold)
            except Exception as error:  # the decider must never get here
                failures.append(error)
                raise

    async def run():
        exchange = Watching(decider)
        values = [
            base_pb2.HeaderValue(key=":method", raw_value=b"POST"),
            base_pb2.HeaderValue(key=":path", raw_value=b"/v1/chat/completions"),
        ]
        values += [base_pb2.HeaderValue(key=k, raw_value=v) for k, v in headers]
        message = ext_proc.ProcessingRequest(
            request_headers=ext_proc.HttpHeaders(headers=base_pb2.HeaderMap(headers=values))
        )
        await exchange.handle(message)
        answer = await exchange.handle(
            ext_proc.ProcessingRequest(
                request_body=ext_proc.HttpBody(body=body, end_of_stream=True)
            )
        )
        kind = answer.WhichOneof("response")
        assert kind in ("request_body", "immediate_response")
        if kind == "immediate_response":
            # 404: a method or path no route of the table serves.
            assert answer.immediate_response.status.code in (200, 400, 401, 404, 429)

    asyncio.run(run())
    assert failures == []
