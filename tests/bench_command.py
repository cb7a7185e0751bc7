"""Running a benchmark's command from a test: its logs in a directory of their own under
TMPDIR, which is the test's, so they go with it; no terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_bench(
    tmp_path: Path, *args: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`qos-sidecar bench ARGS` (or, when the first is a .py file, that script)."""
    command = [sys.executable, *args] if args[0].endswith(".py") else [
        sys.executable, "-m", "sidecar", "bench", *args,
    ]  # fmt: skip
    return subprocess.run(
        command,
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(tmp_path), **(env or {})},
    )  # fmt: skip
