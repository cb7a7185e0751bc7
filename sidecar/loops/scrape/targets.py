"""What `serve --scrape-targets` names: pods by address, or every address of a DNS name.

Comma-separated entries, each `[GROUP=]HOST:PORT` or `[GROUP=]dns:NAME:PORT` (every A and
AAAA record of NAME, as a Kubernetes headless Service gives its pods). Entries of one
group are scraped by one sidecar at a time (a Redis lease per group); without a group,
the group is "default". Pure.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_GROUP = "default"


class TargetsInvalid(ValueError):
    """An entry of --scrape-targets that names no target."""


@dataclass(frozen=True)
class Target:
    group: str
    host: str  # an address or host name; with `dns`, the name whose records to scrape
    port: int
    dns: bool = False

    def __str__(self) -> str:
        where = f"dns:{self.host}:{self.port}" if self.dns else endpoint(self.host, self.port)
        return where if self.group == DEFAULT_GROUP else f"{self.group}={where}"


def endpoint(address: str, port: int) -> str:
    """host:port, with an IPv6 address in brackets: a scraped pod's id."""
    try:
        if ipaddress.ip_address(address).version == 6:
            return f"[{address}]:{port}"
    except ValueError:
        pass
    return f"{address}:{port}"


def parse_targets(text: str) -> tuple[Target, ...]:
    targets = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        group, equals, where = entry.rpartition("=")
        group = group.strip() if equals else DEFAULT_GROUP
        if equals and not group:
            raise TargetsInvalid(f"{entry!r}: a group name before '='")
        dns = where.startswith("dns:")
        host, colon, port = where.removeprefix("dns:").rpartition(":")
        host = host.strip("[]")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise TargetsInvalid(
                f"{entry!r}: HOST:PORT or dns:NAME:PORT, e.g. 10.0.0.7:8000 or "
                "dns:vllm.inference.svc.cluster.local:8000"
            )
        targets.append(Target(group, host, int(port), dns))
    return tuple(dict.fromkeys(targets))
