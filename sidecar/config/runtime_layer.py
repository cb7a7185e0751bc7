"""The mode, served to Envoy as a runtime layer (RTDS), so that it outlives the sidecar.

Envoy subscribes to the layer `qos` over the same gRPC cluster as ext_proc and keeps the
last layer it got while the sidecar is unreachable (a crash, a restart, every worker
gone). The shipped Envoy configs route every request, while `qos.core_only` is 100, by a
route whose ext_proc fails closed: in core-only nothing reaches the GPUs undecided. In
the other modes the layer says 0 and Envoy fails open, as it always did.

State of the world: every response carries the whole layer; Envoy's acknowledgements
are read and need no answer; a change of the mode sends the layer again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import grpc
from envoy.service.discovery.v3 import discovery_pb2
from envoy.service.runtime.v3 import rtds_pb2, rtds_pb2_grpc
from google.protobuf import any_pb2, struct_pb2

from sidecar.config.operator_state import Mode, OperatorMode

log = logging.getLogger(__name__)

LAYER = "qos"
TYPE_URL = "type.googleapis.com/envoy.service.runtime.v3.Runtime"
CORE_ONLY_KEY = "qos.core_only"  # a percentage: the share of requests that fail closed


def values(mode: OperatorMode) -> dict[str, int | str]:
    """The layer's keys and values for `mode` (the same over RTDS and on disk)."""
    return {CORE_ONLY_KEY: 100 if mode.mode is Mode.CORE_ONLY else 0, "qos.mode": mode.mode.value}


def layer(mode: OperatorMode) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values(mode))
    return struct


class RuntimeLayerService(rtds_pb2_grpc.RuntimeDiscoveryServiceServicer):
    """`mode()` is the mode in force; `changed()` is called by the owner whenever it may
    have changed."""

    def __init__(self, mode: Callable[[], OperatorMode]) -> None:
        self._mode = mode
        self._version = 0
        self._served: OperatorMode | None = None
        self._change = asyncio.Event()  # set, and replaced, at each change: a broadcast
        self._closing = asyncio.Event()

    def close(self) -> None:
        """End every stream (a draining sidecar): Envoy keeps the layer it has."""
        self._closing.set()
        self.changed()

    def changed(self) -> None:
        change, self._change = self._change, asyncio.Event()
        change.set()

    async def StreamRuntime(
        self,
        request_iterator: AsyncIterator[discovery_pb2.DiscoveryRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        reading = asyncio.ensure_future(self._read(request_iterator))
        try:
            sent: OperatorMode | None = None
            while not (reading.done() or self._closing.is_set()):
                change = self._change  # before the look: a change after it wakes us
                mode = self._mode()
                if mode != sent:
                    yield self._response(mode)
                    sent = mode
                waiting = asyncio.ensure_future(change.wait())
                await asyncio.wait((waiting, reading), return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading

    def _response(self, mode: OperatorMode) -> discovery_pb2.DiscoveryResponse:
        if mode != self._served:
            self._version += 1
            self._served = mode
        resource = any_pb2.Any()
        resource.Pack(rtds_pb2.Runtime(name=LAYER, layer=layer(mode)))
        version = str(self._version)
        return discovery_pb2.DiscoveryResponse(
            version_info=version, resources=[resource], type_url=TYPE_URL, nonce=version
        )

    async def _read(self, requests: AsyncIterator[discovery_pb2.DiscoveryRequest]) -> None:
        """Envoy's requests until it hangs up: a refusal of the layer is logged."""
        async for request in requests:
            if request.HasField("error_detail"):
                log.warning("Envoy refused the runtime layer: %s", request.error_detail.message)
