"""Child processes of the local stack and the tests: started, checked, stopped by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sidecar.tooling.stack.reaper import Reaper


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc), for the benches."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The processes a process started that still run (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def descendants(pid: int) -> list[int]:
    """Every process below a process that still runs (Linux /proc)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        try:
            below = children(current)
        except (FileNotFoundError, ProcessLookupError):
            continue  # it exited meanwhile
        found += below
        pending += below
    return found


def tree_cpu_seconds(pid: int) -> float:
    """cpu_seconds of a process and of every process below it (serve --processes)."""
    total = 0.0
    for current in (pid, *descendants(pid)):
        try:
            total += cpu_seconds(current)
        except (FileNotFoundError, ProcessLookupError):
            continue  # it exited meanwhile
    return total


def stop_on_sigterm() -> None:
    """From now on a SIGTERM stops this process as Ctrl-C does: through its clean-up, so
    the servers it started do not outlive it (the benches)."""
    signal.signal(signal.SIGTERM, _as_interrupt)


def _as_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# Told of every process started and stopped here, when set (`up`: stack/reaper.py).
_reaper: Reaper | None = None


def reaped_by(reaper: Reaper | None) -> None:
    """From now on, `reaper` ends what is started here should this process die first."""
    global _reaper
    _reaper = reaper


class StackError(RuntimeError):
    """A component did not start or did not become ready."""


class ManagedProcess:
    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self._env = env
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None, f"{self.name} was not started"
        return self._process.pid

    def start(self) -> None:
        env = {**os.environ, **(self._env or {})}
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # Its own process group: a Ctrl-C at the terminal reaches only the
                # parent, which then stops the children in order. The parent's session
                # still: Linux shares the CPU between sessions first (autogroup), so the
                # stack and its engine take one share against the machine's other work,
                # and within it niceness puts Envoy and the sidecar before the engine's
                # compute. (No preexec_fn: running Python between fork and exec
                # deadlocks when the parent has threads, as gRPC's.)
                process_group=0,
            )
        if _reaper is not None:  # its pid names its process group
            _reaper.started(self._process.pid)

    def start_ready(self, check: Callable[[], bool], timeout: float = 30.0) -> ManagedProcess:
        """Start, and wait until `check` holds; a process that never gets there is stopped."""
        self.start()
        try:
            self.wait_ready(check, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def send_signal(self, signum: int) -> None:
        assert self._process is not None, f"{self.name} was not started"
        self._process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        assert self._process is not None, f"{self.name} was not started"
        return self._process.wait(timeout)

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def wait_ready(self, check: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise StackError(f"{self.name} exited during start-up:\n{self.log_tail()}")
            if check():
                return
            time.sleep(0.05)
        raise StackError(f"{self.name} not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if _reaper is not None:
            _reaper.stopped(process.pid)
        return process.returncode

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
