"""A tiny DNS server on a loopback UDP port, for tests: A records from a table the test
changes as it goes (a headless Service whose pods come and go). Every other question is
answered NXDOMAIN, or with no records for a known name."""

from __future__ import annotations

import asyncio

import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset


class _Answering(asyncio.DatagramProtocol):
    def __init__(self, records: dict[str, list[str]]) -> None:
        self._records = records
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self._transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        query = dns.message.from_wire(data)
        reply = dns.message.make_response(query)
        question = query.question[0]
        name = question.name.to_text().rstrip(".")
        if name not in self._records:
            reply.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype == dns.rdatatype.A:
            reply.answer.append(
                dns.rrset.from_text_list(
                    question.name, 1, dns.rdataclass.IN, dns.rdatatype.A, self._records[name]
                )
            )
        assert self._transport is not None
        self._transport.sendto(reply.to_wire(), addr)


class DnsServer:
    """`records`: name -> IPv4 addresses, read at each question."""

    def __init__(self, records: dict[str, list[str]]) -> None:
        self.records = records
        self._transport: asyncio.DatagramTransport | None = None
        self.address = ""

    async def __aenter__(self) -> DnsServer:
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(
            lambda: _Answering(self.records), local_addr=("127.0.0.1", 0)
        )
        host, port = self._transport.get_extra_info("sockname")[:2]
        self.address = f"{host}:{port}"
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._transport is not None:
            self._transport.close()
