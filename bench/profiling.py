"""Where a processor's CPU goes, from py-spy's samples taken under wrk.

`record` runs py-spy on a process for some seconds (collapsed stacks, or a flame graph).
`breakdown` attributes each sample to the first part of the program met from
the leaf up: gRPC's runtime, the event loop, the Redis client, metrics, logging, JSON,
the completion signal (the access-log stream), the decision (the rest of the sidecar's
own code), everything else. A sample is a moment the process was on a CPU (py-spy
leaves idle threads out), so the shares split the process's CPU time.
"""

from __future__ import annotations

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
    ("completion signal", re.compile(r"(^|/)sidecar/completion/")),
    ("decision", re.compile(r"(^|/)sidecar/")),
    ("event loop", re.compile(r"(^|/)asyncio/|_asyncio|uvloop|selectors|socketmodule")),
)
OTHER = "everything else"
_FRAME = re.compile(r"\(([^)]*)\)\s*$")


def record(pid: int, seconds: float, out: Path, form: str = "raw", rate: int = 250) -> Path:
    """py-spy on `pid` for `seconds`, native frames included (gRPC's core is C++):
    collapsed stacks (`raw`, for `breakdown`) or a flame graph (`flamegraph`, an SVG)."""
    binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    command = [binary, "record", "--pid", str(pid), "--duration", str(round(seconds))]
    command += ["--rate", str(rate), "--native", "--format", form, "--output", str(out)]
    subprocess.run(command, check=True, capture_output=True)
    return out


def breakdown(raw: Path) -> dict[str, float]:
    """Each part's share of the samples in `raw` (collapsed stacks: `a;b;leaf count`)."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        counts[_part(stack.split(";"))] += int(count)
    total = sum(counts.values()) or 1
    return {part: counts[part] / total for part, _ in (*PARTS, (OTHER, None))}


def _part(frames: list[str]) -> str:
    for frame in reversed(frames):
        match = _FRAME.search(frame)
        where = match.group(1) if match else frame
        for part, pattern in PARTS:
            if pattern.search(where):
                return part
    return OTHER
