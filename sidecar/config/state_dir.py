"""The sidecar's state directory: what it keeps on disk so that a restart never serves
defaults (the last known good configuration, config/local_copy.py) and what Envoy reads
of it without the sidecar (the mode, config/envoy_layer.py).

One directory per gateway (a pod's volume, shared by Envoy and the sidecar's workers):
`--state-dir` / QOS_STATE_DIR, else $XDG_STATE_HOME/qos-sidecar, else
~/.local/state/qos-sidecar. The configuration's copy is named after the Redis it came
from, so a sidecar pointed at another Redis never takes one store's state for another's.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from sidecar import redis_connect

log = logging.getLogger(__name__)

STATE_DIR_ENV = "QOS_STATE_DIR"
# The link Envoy's disk runtime layer follows (envoy/envoy.yaml: qos-last-known).
ENVOY_LINK = "envoy-runtime"
ENVOY_LAYERS = "envoy-layers"
# Made when the pod's Envoy has drained (`drain-envoy`): its preStop hook waits for it.
ENVOY_DRAINED = "envoy-drained"


def default_dir() -> Path:
    """Where the state lives when no flag says: QOS_STATE_DIR, else the XDG state home."""
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV])
    home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(home) / "qos-sidecar"


@dataclass(frozen=True)
class StateDir:
    path: Path

    @classmethod
    def resolve(cls, configured: str) -> StateDir:
        return cls(Path(configured) if configured else default_dir())

    def make(self) -> None:
        """The directory, readable by its owner (the copy holds the API keys' digests, and
        is its owner's alone) and by Envoy's user through the group where a deployment
        shares it. One that cannot be made is said, not fatal: the sidecar decides all the
        same, and each write it misses is said and tried again."""
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o750)
        except OSError as error:
            log.error("state directory %s not made: %s", self.path, error.strerror or error)

    def configuration_copy(self, redis_url: str) -> Path:
        """The last known good configuration read from the Redis at `redis_url`."""
        where = redis_connect.redacted(redis_url)
        return self.path / f"config-{hashlib.sha256(where.encode()).hexdigest()[:16]}.json"

    @property
    def envoy_link(self) -> Path:
        return self.path / ENVOY_LINK

    @property
    def envoy_layers(self) -> Path:
        return self.path / ENVOY_LAYERS

    @property
    def envoy_drained(self) -> Path:
        return self.path / ENVOY_DRAINED
