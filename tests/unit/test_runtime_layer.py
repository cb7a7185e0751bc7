"""The mode as Envoy's runtime layer: sent at once, again on a change, and the stream
ends when the sidecar drains."""

from __future__ import annotations

import asyncio

import pytest
from envoy.service.discovery.v3 import discovery_pb2
from envoy.service.runtime.v3 import rtds_pb2

from sidecar.config.operator_state import Mode, OperatorMode
from sidecar.config.runtime_layer import CORE_ONLY_KEY, LAYER, TYPE_URL, RuntimeLayerService

pytestmark = pytest.mark.asyncio


def core_only(response: discovery_pb2.DiscoveryResponse) -> float:
    (resource,) = response.resources
    runtime = rtds_pb2.Runtime()
    assert resource.Unpack(runtime) and runtime.name == LAYER
    return runtime.layer.fields[CORE_ONLY_KEY].number_value


async def test_the_layer_follows_the_mode_and_ends_with_the_drain():
    mode = OperatorMode()
    service = RuntimeLayerService(lambda: mode)
    hung_up = asyncio.Event()

    async def requests():
        yield discovery_pb2.DiscoveryRequest(type_url=TYPE_URL, resource_names=[LAYER])
        await hung_up.wait()  # Envoy stays subscribed

    stream = service.StreamRuntime(requests(), None)  # type: ignore[arg-type]
    first = await anext(stream)
    assert (first.type_url, core_only(first)) == (TYPE_URL, 0)
    mode = OperatorMode(mode=Mode.CORE_ONLY)
    service.changed()
    second = await asyncio.wait_for(anext(stream), 2)
    assert core_only(second) == 100 and second.version_info != first.version_info
    service.changed()  # nothing new: nothing sent
    service.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(stream), 2)


async def test_a_stream_ends_when_envoy_hangs_up():
    service = RuntimeLayerService(OperatorMode)

    async def requests():
        yield discovery_pb2.DiscoveryRequest(type_url=TYPE_URL, resource_names=[LAYER])

    stream = service.StreamRuntime(requests(), None)  # type: ignore[arg-type]
    assert core_only(await anext(stream)) == 0
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(anext(stream), 2)
