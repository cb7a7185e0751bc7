"""The mode on disk, as a runtime layer Envoy reads itself (its disk layer, named
qos-last-known in envoy/envoy.yaml), so that an Envoy (re)started while no sidecar
answers still fails closed in core-only.

Envoy's disk layer follows a symbolic link and reloads when the link is swapped by a
rename. Each layer is a directory named after its values, written once under a
temporary name and renamed into place, so Envoy never reads half of one; the link is
relative, so it resolves wherever the directory is mounted (Envoy's container and the
sidecar's may mount it at different paths). Every worker of a sidecar writes the same
layer: whichever renames last, the values are the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil

from sidecar.config.operator_state import OperatorMode
from sidecar.config.runtime_layer import values
from sidecar.config.state_dir import StateDir


def layer_name(mode: OperatorMode) -> str:
    canonical = json.dumps(values(mode), sort_keys=True)
    return f"{mode.mode.value}-{hashlib.sha256(canonical.encode()).hexdigest()[:12]}"


def write(state: StateDir, mode: OperatorMode) -> None:
    """Point Envoy's link at the layer for `mode`, writing the layer first if needed."""
    name = layer_name(mode)
    layers = state.envoy_layers
    layer = layers / name
    if not layer.is_dir():
        layers.mkdir(parents=True, exist_ok=True)
        temporary = layers / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
        for key, value in values(mode).items():
            file = temporary.joinpath(*key.split("."))  # qos.core_only -> qos/core_only
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(str(value))
        try:
            temporary.rename(layer)
        except OSError:  # another worker's rename came first: the same values
            shutil.rmtree(temporary, ignore_errors=True)
    target = os.path.join(layers.name, name)
    link = state.envoy_link
    if os.path.islink(link) and os.readlink(link) == target:
        return
    swap = state.path / f".{link.name}.{os.getpid()}.{secrets.token_hex(4)}"
    os.symlink(target, swap)
    try:
        os.replace(swap, link)  # a rename: Envoy's watch sees the link moved into place
    except BaseException:
        swap.unlink(missing_ok=True)
        raise


def read(state: StateDir) -> dict[str, str]:
    """The values the link points at now, as Envoy would read them ({} without a link)."""
    link = state.envoy_link
    if not link.is_dir():
        return {}
    return {
        ".".join(file.relative_to(link).parts): file.read_text()
        for file in sorted(link.rglob("*"))
        if file.is_file()
    }
