"""The runtime never imports the tooling (the mock engine, the local stack, the bench
scenarios); only the command line names them, to run them."""

from __future__ import annotations

import ast
from pathlib import Path

SIDECAR = Path(__file__).resolve().parents[2] / "sidecar"
TOOLING = "sidecar.tooling"


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_runtime_imports_none_of_the_tooling():
    runtime = [
        path for path in SIDECAR.rglob("*.py") if "tooling" not in path.relative_to(SIDECAR).parts
    ]
    assert len(runtime) > 50
    offending = {
        str(path.relative_to(SIDECAR)): sorted(n for n in imported(path) if n.startswith(TOOLING))
        for path in runtime
    }
    assert {path: names for path, names in offending.items() if names} == {}
