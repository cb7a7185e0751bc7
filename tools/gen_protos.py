"""Compile proto/ into sidecar/generated/ with grpcio-tools.

protoc writes absolute imports named after the proto package (``from qos.v1 import``);
they are rewritten to live under ``sidecar.generated`` so nothing needs sys.path tricks.
Run: python tools/gen_protos.py [OUT_DIR]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROTO_ROOT = REPO / "proto"
DEFAULT_OUT = REPO / "sidecar" / "generated"
PACKAGE = "sidecar.generated"
_IMPORT = re.compile(r"^from (qos(?:\.\w+)*) import ", re.MULTILINE)


def generate(out_dir: Path = DEFAULT_OUT) -> list[Path]:
    from grpc_tools import protoc  # a build-time dependency only

    protos = sorted(PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p) for p in protos],
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))
    written = sorted(p for p in out_dir.rglob("*.py*") if p.suffix in (".py", ".pyi"))
    for path in written:
        text = _IMPORT.sub(rf"from {PACKAGE}.\1 import ", path.read_text())
        path.write_text(text)
    for folder in {p.parent for p in written} | {out_dir}:
        (folder / "__init__.py").touch()
    return sorted(out_dir.rglob("*.py*"))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    for path in generate(target):
        print(path.relative_to(target))
