"""The scrape mode's resolver against a real DNS server on loopback (UDP): every A record
of a name, none for a name that does not exist, a refusal when nobody answers."""

from __future__ import annotations

import socket

import dns.exception
import pytest

from sidecar.loops.scrape.resolver import Resolver
from tests.integration.dns_server import DnsServer

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_every_address_of_a_name_and_none_of_an_unknown_one():
    records = {"vllm.inference.svc.cluster.local": ["127.0.0.1", "127.0.0.2"]}
    async with DnsServer(records) as server:
        resolver = Resolver(server.address)
        assert await resolver.addresses("vllm.inference.svc.cluster.local") == [
            "127.0.0.1",
            "127.0.0.2",
        ]
        records["vllm.inference.svc.cluster.local"] = ["127.0.0.3"]  # a pod replaced
        assert await resolver.addresses("vllm.inference.svc.cluster.local") == ["127.0.0.3"]
        assert await resolver.addresses("nothing.here") == []


async def test_a_server_that_does_not_answer_is_an_error_not_an_empty_name():
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))  # takes the questions, answers none
    try:
        port = silent.getsockname()[1]
        with pytest.raises(dns.exception.DNSException):
            await Resolver(f"127.0.0.1:{port}", timeout=0.3).addresses("vllm")
    finally:
        silent.close()
