"""Every address of a DNS name (A and AAAA), by dnspython's asyncio resolver: the system's
resolver configuration (/etc/resolv.conf, its search domains), or one given server."""

from __future__ import annotations

import dns.asyncresolver
import dns.exception
import dns.resolver


class Resolver:
    def __init__(self, server: str = "", timeout: float = 2.0) -> None:
        """`server`: HOST:PORT of the DNS server to ask; empty: the system's."""
        self._resolver = dns.asyncresolver.Resolver(configure=not server)
        if server:
            host, _, port = server.rpartition(":")
            self._resolver.nameservers = [host.strip("[]")]
            self._resolver.port = int(port)
        self._resolver.lifetime = timeout

    async def addresses(self, name: str) -> list[str]:
        """The name's addresses, IPv4 first, each family sorted; [] when it has none
        (NXDOMAIN, no answer). Raises dns.exception.DNSException when the server does not
        answer."""
        found: list[str] = []
        for kind in ("A", "AAAA"):
            try:
                answer = await self._resolver.resolve(name, kind, search=True)
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
                continue
            found += sorted(record.to_text() for record in answer)
        return found
