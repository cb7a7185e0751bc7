"""One of the processes of `serve --processes N`: who it is among its siblings.

The supervisor names every worker when it starts it (QOS_WORKER, JSON). A worker's
sidecar id is its group's stem and its index, so the slot ids it hands out (id-number-nonce)
tell every sibling which of them an exchange's end belongs to.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

WORKER_ENV = "QOS_WORKER"


@dataclass(frozen=True)
class Worker:
    index: int
    count: int
    group: str  # hex, shared by the siblings
    directory: Path  # the siblings' sockets

    @property
    def owner(self) -> str:
        """This worker's sidecar id (the owner named in its slot ids)."""
        return f"{self.group}w{self.index}"

    def socket(self, index: int) -> Path:
        return self.directory / f"worker-{index}.sock"

    def sibling_of(self, slot: str) -> int | None:
        """The sibling (not this worker) that handed out `slot`, if any."""
        match = re.fullmatch(rf"{self.group}w(\d+)-\d+-[0-9a-f]+", slot)
        if match is None:
            return None
        index = int(match.group(1))
        return index if index != self.index and index < self.count else None

    def to_env(self) -> str:
        return json.dumps(
            {"index": self.index, "count": self.count, "group": self.group,
             "directory": str(self.directory)}
        )  # fmt: skip

    @classmethod
    def from_env(cls) -> Worker | None:
        raw = os.environ.get(WORKER_ENV)
        if not raw:
            return None
        given = json.loads(raw)
        return cls(given["index"], given["count"], given["group"], Path(given["directory"]))
