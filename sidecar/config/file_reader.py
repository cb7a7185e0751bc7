"""A configuration file read in a process of its own (config/files.py's readers): its
parsing, validation, and for a tenants file the plan of what applying it changes
(config/declared.py), never hold the sidecar's event loop, nor its GIL, however large the
file; a file that would exhaust memory or time ends that process, not the sidecar, and
is refused.

    python -m sidecar.config.file_reader config|tenants PATH < HELD

takes the snapshot held (HeldTenants, for a tenants file) on standard input, writes a
pickled Read on standard output (what a configuration file declares, or a tenants file's
TenantsPlan) and exits 0; a refusal goes to standard error with exit code 2.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import resource
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where they run: the reader lowers its priority first
    from sidecar.config.files import FileRefused, Read

READ_SECONDS = 30.0
MEMORY_BYTES = 2 * 1024 * 1024 * 1024
# Reading a file is background work: on a busy gateway the decisions go first.
NICENESS = 10
REFUSED = 2


async def read_apart(kind: str, path: Path, held: bytes = b"") -> Read | FileRefused:
    """What the file at `path` declares, read by a process of its own (given `held`: the
    snapshot held, as HeldTenants); or its refusal."""
    from sidecar.config.files import FileRefused

    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",  # the installed sidecar, not whatever the working directory holds
        "-m",
        __name__,
        kind,
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(held), READ_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        return FileRefused(f"{path} refused: not read within {READ_SECONDS:g} s")
    except asyncio.CancelledError:
        process.kill()
        await process.wait()
        raise
    said = err.decode(errors="replace").strip()
    if process.returncode == 0:
        found: Read = pickle.loads(out)  # from our own reader
        return found
    if process.returncode == REFUSED:
        return FileRefused(said)
    return FileRefused(f"{path} refused: its reader failed ({said[-300:] or process.returncode})")


def main(argv: list[str]) -> int:
    kind, path = argv
    os.nice(NICENESS)
    # What one file may take: beyond it the reader fails and the file is refused.
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    from sidecar.config.declared import HeldTenants, plan
    from sidecar.config.files import FileRefused, Read, read_config, read_tenants

    def read(file: Path, held: bytes) -> Read:
        if kind == "config":
            return read_config(file)
        found = read_tenants(file)
        snapshot = HeldTenants.model_validate_json(held).snapshot()
        return Read(found.fingerprint, plan(snapshot, found.declared, str(file)))

    try:
        found = read(Path(path), sys.stdin.buffer.read())
    except FileRefused as refused:
        print(refused, file=sys.stderr)
        return REFUSED
    except (MemoryError, RecursionError) as error:
        print(f"{path} refused: beyond what it may take to read ({error!r})", file=sys.stderr)
        return REFUSED
    sys.stdout.buffer.write(pickle.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
