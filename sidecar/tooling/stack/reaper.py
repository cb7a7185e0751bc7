"""Nothing left behind when `up` itself is killed.

`up` starts each of its processes in a process group of its own (a Ctrl-C at the
terminal reaches only `up`, which stops them in order), so a SIGKILL of `up` would leave
Redis, Envoy, the mocks and the sidecar running. A reaper, started first, holds the read end
of a pipe `up` writes to: each process group `up` starts, each it stops itself, and a
last word when it is done. Should the pipe close without that word (`up` died, however),
the reaper ends every group still registered: SIGTERM, then SIGKILL after a grace.

    python -m sidecar.tooling.stack.reaper     # reads "+PGID", "-PGID", "done" lines
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

GRACE_SECONDS = 5.0


class Reaper:
    """The writing end, in `up`."""

    def __init__(self) -> None:
        read, self._write = os.pipe()
        os.set_inheritable(self._write, False)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "sidecar.tooling.stack.reaper"],
            stdin=read,
            start_new_session=True,  # not reached by the terminal's Ctrl-C, nor by up's end
        )
        os.close(read)

    def started(self, group: int) -> None:
        self._say(f"+{group}")

    def stopped(self, group: int) -> None:
        self._say(f"-{group}")

    def done(self) -> None:
        """Everything was stopped in order: the reaper ends without ending anything."""
        self._say("done")
        os.close(self._write)
        self._process.wait(10)

    def _say(self, line: str) -> None:
        os.write(self._write, f"{line}\n".encode())


def _end(groups: set[int]) -> None:
    for group in groups:
        _signal(group, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while groups and time.monotonic() < deadline:
        groups = {group for group in groups if _alive(group)}
        time.sleep(0.1)
    for group in groups:
        _signal(group, signal.SIGKILL)


def _signal(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def main() -> int:
    groups: set[int] = set()
    for line in sys.stdin:
        word = line.strip()
        if word == "done":
            return 0
        if word[:1] in "+-" and word[1:].isdigit():
            (groups.add if word[0] == "+" else groups.discard)(int(word[1:]))
    _end(groups)  # the pipe closed without "done": up is gone
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(main())
