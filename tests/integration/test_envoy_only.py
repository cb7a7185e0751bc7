"""Envoy's services on the sidecar's gRPC port (ext_proc, the access log, the runtime
layer) answer only the gateway's Envoy: a caller without its token changes no slot, no
bucket and learns no mode, and is counted. The stack's Envoy presents the token from its
environment, as the shipped configs have it."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import grpc
import pytest
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.discovery.v3 import discovery_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from envoy.service.runtime.v3 import rtds_pb2_grpc

from sidecar.envoy_auth import HEADER
from sidecar.generated.qos.v1 import load_report_pb2, load_report_pb2_grpc
from sidecar.ports import free_port
from sidecar.tooling.extproc_client import http_headers
from sidecar.tooling.stack.admin_client import scrape
from sidecar.tooling.stack.readiness import pods_reporting
from sidecar.tooling.stack.stack import start_envoy
from tests.integration.helpers import (
    decision_count,
    p1_in_flight,
    recorded,
    recording_upstream,
    settlement_counts,
    stack_with_tenant,
    to_one_upstream,
    wait_until,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEY = "sk-shop-envoy-only"
BODY = {"model": "mock-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with stack_with_tenant(tmp_path_factory.mktemp("envoy-only"), "shop", "p1", KEY) as stack:
        yield stack


def refused(stack, service: str, reason: str) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    key = f'qos_grpc_calls_refused_total{{reason="{reason}",service="{service}"}}'
    return samples.get(key, 0.0)


def p1_debt(stack) -> float:
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    return samples.get('qos_bucket_debt_tokens{pool="default",tier="p1"}', 0.0)


async def chat(url: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {KEY}"}
        async with session.post(f"{url}/v1/chat/completions", json=BODY, headers=headers) as r:
            return r.status, await r.json(content_type=None)


def as_envoy(stack) -> tuple[tuple[str, str], ...]:
    return ((HEADER, stack.envoy_token),)


async def hold_a_slot(channel: grpc.aio.Channel, metadata) -> tuple[object, str]:
    """An ext_proc stream as Envoy's, admitted and kept open: the stream and its slot."""
    stream = ext_proc_grpc.ExternalProcessorStub(channel).Process(metadata=metadata)
    headers = {":method": "POST", ":path": "/v1/chat/completions", "authorization": f"Bearer {KEY}"}
    await stream.write(ext_proc.ProcessingRequest(request_headers=http_headers(headers, False)))
    await stream.read()
    body = ext_proc.HttpBody(body=json.dumps(BODY).encode(), end_of_stream=True)
    await stream.write(ext_proc.ProcessingRequest(request_body=body))
    answer = await stream.read()
    exchange = answer.dynamic_metadata.fields["qos.exchange"].struct_value
    return stream, exchange.fields["slot"].string_value


def forged_end(slot: str, completion_tokens: int | None) -> als_pb2.StreamAccessLogsMessage:
    """What the attack sends: the exchange of `slot` ended, with this usage."""
    entry = accesslog_pb2.HTTPAccessLogEntry()
    entry.request.request_headers["x-qos-tier"] = "p1"
    entry.response.response_code.value = 200
    entry.common_properties.metadata.filter_metadata["qos.exchange"].update({"slot": slot})
    if completion_tokens is not None:
        usage = {"prompt_tokens": 1, "completion_tokens": completion_tokens}
        entry.common_properties.metadata.filter_metadata["qos"].update(usage)
    message = als_pb2.StreamAccessLogsMessage()
    message.identifier.log_name = "qos"
    message.http_logs.log_entry.append(entry)
    return message


async def send_end(channel, message, metadata=()) -> grpc.StatusCode:
    async def entries():
        yield message

    stub = als_pb2_grpc.AccessLogServiceStub(channel)
    try:
        await stub.StreamAccessLogs(entries(), metadata=metadata, timeout=5)
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_a_forged_access_log_entry_frees_no_slot_and_settles_nothing(stack):
    async with grpc.aio.insecure_channel(stack.sidecar_grpc) as channel:
        stream, slot = await hold_a_slot(channel, as_envoy(stack))
        try:
            assert slot and p1_in_flight(stack) == 1
            settled_before = settlement_counts(stack)
            forged = forged_end(slot, completion_tokens=1_050_000)
            assert await send_end(channel, forged) == grpc.StatusCode.UNAUTHENTICATED
            wrong = ((HEADER, "not-the-token"),)
            assert await send_end(channel, forged, wrong) == grpc.StatusCode.UNAUTHENTICATED
            assert refused(stack, "access_log", "missing") == 1
            assert refused(stack, "access_log", "wrong") == 1
            # Nothing it said was applied: the slot is held, nothing settled, no debt.
            assert p1_in_flight(stack) == 1
            assert settlement_counts(stack) == settled_before
            assert p1_debt(stack) == 0
            # The same end from Envoy gives the slot back: the token, not the entry, was
            # what stopped it.
            end = forged_end(slot, completion_tokens=None)
            assert await send_end(channel, end, as_envoy(stack)) == grpc.StatusCode.OK
            await wait_until(lambda: p1_in_flight(stack) == 0, what="the slot given back")
        finally:
            stream.cancel()


async def test_the_runtime_layer_is_served_to_envoy_alone(stack):
    async def subscribe(metadata) -> discovery_pb2.DiscoveryResponse:
        async def requests():
            if not metadata:
                # Nothing sent where the call is refused at its start: a message on its
                # way as the refusal comes fails the call on the client's side instead
                # (INTERNAL, "Failed execute_batch"), hiding the server's status.
                await asyncio.Event().wait()
            yield discovery_pb2.DiscoveryRequest(resource_names=["qos"])

        stub = rtds_pb2_grpc.RuntimeDiscoveryServiceStub(channel)
        call = stub.StreamRuntime(requests(), metadata=metadata, timeout=5)
        try:
            return await call.read()
        finally:
            call.cancel()

    async with grpc.aio.insecure_channel(stack.sidecar_grpc) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refusal:
            await subscribe(())
        assert refusal.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert refused(stack, "runtime", "missing") == 1
        layer = await subscribe(as_envoy(stack))
        assert layer.type_url.endswith("envoy.service.runtime.v3.Runtime")


async def test_ext_proc_without_the_token_decides_nothing_and_answers_503(stack):
    admitted = decision_count(stack.sidecar_admin_url)
    async with grpc.aio.insecure_channel(stack.sidecar_grpc) as channel:
        stream = ext_proc_grpc.ExternalProcessorStub(channel).Process()
        headers = {":method": "POST", ":path": "/v1/chat/completions"}
        await stream.write(ext_proc.ProcessingRequest(request_headers=http_headers(headers, False)))
        answer = await stream.read()
        stream.cancel()
    assert answer.immediate_response.status.code == 503
    assert json.loads(answer.immediate_response.body)["error"]["code"] == "qos_unavailable"
    assert refused(stack, "ext_proc", "missing") == 1
    assert decision_count(stack.sidecar_admin_url) == admitted
    # The stack's Envoy, with the token, is served as ever, and its access log gives the
    # slot back.
    status, body = await chat(stack.envoy_url)
    assert status == 200, body
    assert decision_count(stack.sidecar_admin_url, reach=admitted + 1) == admitted + 1
    await wait_until(lambda: p1_in_flight(stack) == 0, what="Envoy's access log heard")


async def test_an_envoy_without_the_token_fails_closed_not_open(stack, tmp_path):
    """Envoy's own environment lacks the token: every request is answered 503, none goes
    upstream undecided (its API routes fail open on a gRPC error; this is no error)."""
    with recording_upstream(tmp_path) as upstream:
        listen, admin = free_port(), free_port()
        config = to_one_upstream(stack.envoy_config(listen, admin), upstream)
        envoy = start_envoy(config, tmp_path, admin, "envoy-no-token", 1)
        try:
            status, body = await chat(f"http://127.0.0.1:{listen}")
        finally:
            envoy.stop()
        assert status == 503 and body["error"]["code"] == "qos_unavailable", body
        assert recorded(upstream) == []
    assert refused(stack, "ext_proc", "wrong") >= 1  # Envoy sends "-" for an unset variable


async def test_a_load_report_without_the_report_token_changes_no_load(stack):
    """The fourth service on the port: a pod said full (which would shed a tier) by a
    caller without the reporters' token is refused, counted, and not applied."""
    reporting = pods_reporting(stack.sidecar_admin_url)
    fake = load_report_pb2.LoadReport(pod_id="forged-pod", kv_cache_usage=0.99)
    async with grpc.aio.insecure_channel(stack.sidecar_grpc) as channel:
        stub = load_report_pb2_grpc.LoadReporterStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refusal:
            await stub.Report(fake, timeout=5, metadata=as_envoy(stack))  # Envoy's is no use
    assert refusal.value.code() == grpc.StatusCode.UNAUTHENTICATED
    samples = scrape(f"{stack.sidecar_admin_url}/metrics")
    assert samples['qos_load_reports_refused_total{reason="unauthenticated"}'] == 1
    assert pods_reporting(stack.sidecar_admin_url) == reporting
    status, body = await chat(stack.envoy_url)
    assert status == 200, body  # nothing shed for it
