"""Where the real engines' tools live: the engine virtualenv, and the cache that keeps
what is made once per machine (the tiny model, llama-server's builds).

The engine virtualenv is `.venv-engine`, or QOS_ENGINE_VENV; scripts/setup-engine.sh
makes it from the `engine` extra (vLLM's CPU build pins its own torch). The cache is
QOS_ENGINE_MODEL_DIR, or the user's ~/.cache/qos-sidecar.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from sidecar.tooling.stack.processes import StackError

ROOT = Path(__file__).resolve().parents[3]


def venv() -> Path:
    return Path(os.environ.get("QOS_ENGINE_VENV", ROOT / ".venv-engine"))


def python() -> Path:
    interpreter = venv() / "bin" / "python"
    if not interpreter.exists():
        raise StackError(
            f"no engine virtualenv at {venv()}: run scripts/setup-engine.sh "
            "(or set QOS_ENGINE_VENV to one with the `engine` extra)"
        )
    return interpreter


def cache() -> Path:
    return Path(os.environ.get("QOS_ENGINE_MODEL_DIR") or Path.home() / ".cache" / "qos-sidecar")


def made_once(name: str, done: str, make: Callable[[Path], None]) -> Path:
    """The cache's directory `name`, made by `make` into a fresh directory the first time
    and renamed into place whole (so a failed or concurrent making leaves no half of it);
    `done` is the file whose presence says it is made."""
    directory = cache() / name
    if (directory / done).exists():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    making = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=directory.parent))
    try:
        make(making)
        try:
            making.rename(directory)  # another process may have made it meanwhile
        except OSError:
            if not (directory / done).exists():
                raise
    finally:
        shutil.rmtree(making, ignore_errors=True)
    return directory
