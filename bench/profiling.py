"""Where a processor's CPU goes, from py-spy's samples taken under wrk.

`record` runs py-spy on a process for some seconds (collapsed stacks, or a flame graph).
`split` attributes each sample of the main thread to the first part of the program met
from the leaf up (gRPC's runtime, the event loop, the Redis client, metrics, logging,
JSON, protobuf, the completion signal: the access-log stream, the decision: the rest of
the sidecar's own code, everything else) and weighs them by the thread's own CPU time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

# (part, how a frame's file or library is recognised), tried in this order on each frame
# from the leaf up; the first part that matches takes the sample.
PARTS = (
    ("gRPC runtime", re.compile(r"(^|/)grpc/|cygrpc|libgrpc|grpc_core")),
    ("Redis client", re.compile(r"(^|/)redis/|hiredis")),
    ("metrics", re.compile(r"(^|/)prometheus_client/")),
    ("logging", re.compile(r"(^|/)logging/|pythonjsonlogger/")),
    ("JSON", re.compile(r"(^|/)json/|_json")),
    ("protobuf", re.compile(r"(^|/)google/protobuf/|_message\.|upb")),
    ("completion signal", re.compile(r"(^|/)sidecar/request/completion/")),
    ("decision", re.compile(r"(^|/)sidecar/")),
    ("event loop", re.compile(r"(^|/)asyncio/|_asyncio|uvloop|selectors|socketmodule")),
)
OTHER = "everything else"
_FRAME = re.compile(r"\(([^)]*)\)\s*$")


def record(pid: int, seconds: float, out: Path, form: str = "raw", rate: int = 250) -> Path:
    """py-spy on `pid` for `seconds`, native frames included (gRPC's core is C++), each
    stack under its thread: collapsed stacks (`raw`, for `breakdown`) or a flame graph
    (`flamegraph`, an SVG)."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    command = [binary, "record", "--pid", str(pid), "--duration", str(round(seconds))]
    command += ["--rate", str(rate), "--native", "--threads", "--format", form]
    subprocess.run([*command, "--output", str(out)], check=True, capture_output=True)
    return out


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of `pid`: its name and the CPU seconds it has used (/proc)."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        found[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / _TICKS)
    return found


def split(raw: Path, pid: int, before: dict, after: dict) -> dict[str, float]:
    """The process's CPU over the window (`thread_cpu` before and after), by part: the
    main thread's by where its samples were; every other thread's (gRPC's poller thread,
    its C++ I/O and timer threads) is gRPC's runtime. py-spy counts a thread waiting for
    the GIL as busy, so samples alone would overweigh the poller thread: each thread's
    own CPU time weighs its samples instead."""
    spent = {tid: cpu - before.get(tid, (name, 0.0))[1] for tid, (name, cpu) in after.items()}
    total = sum(spent.values()) or 1.0
    parts = dict.fromkeys([part for part, _ in PARTS] + [OTHER], 0.0)
    shares = _shares_by_thread(raw).get(pid, {})
    for tid, cpu in spent.items():
        if tid == pid and shares:
            for part, share in shares.items():
                parts[part] += share * cpu / total
        else:
            parts["gRPC runtime"] += cpu / total
    return parts


def _shares_by_thread(raw: Path) -> dict[int, dict[str, float]]:
    counts: dict[int, Counter[str]] = {}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        thread = _THREAD.match(stack)
        if thread is None or not count.isdigit():
            continue
        frames = stack.split(";")[1:]
        counts.setdefault(int(thread.group(1)), Counter())[_part(frames)] += int(count)
    return {
        tid: {part: n / (sum(c.values()) or 1) for part, n in c.items()}
        for tid, c in counts.items()
    }


def _part(frames: list[str]) -> str:
    for frame in reversed(frames):
        match = _FRAME.search(frame)
        where = match.group(1) if match else frame
        for part, pattern in PARTS:
            if pattern.search(where):
                return part
    return OTHER


_THREAD = re.compile(r"thread \((\d+)\)")
_TICKS = os.sysconf("SC_CLK_TCK")
