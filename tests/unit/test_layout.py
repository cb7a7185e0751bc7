"""The runtime never imports the tooling (the mock engine, the local stack, the bench
scenarios); only the command line names them, to run them."""

from __future__ import annotations

import ast
import textwrap
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


# The layers, lowest first: a module may import its own layer and those below it. The
# shared modules (config, the route table, the budgets' Redis layout, refusals, Redis
# and metrics plumbing) are at the bottom; the server and the command line, which wire
# everything, at the top.
LAYERS = ("shared", "loops", "request", "operator", "root")
ROOT = {"server", "deciders", "cli", "__main__", "admin", "workers"}
GROUPS = {"loops", "request", "operator"}


def module_of(path: Path) -> str:
    parts = path.relative_to(SIDECAR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    second = module.split(".")[1] if "." in module else ""
    if second in GROUPS:
        return second
    return "root" if second in ROOT else "shared"


def package_of(module: str) -> str:
    """A package as a reader sees one: a group's subpackage, else a top-level one."""
    parts = module.split(".")
    return ".".join(parts[:3] if len(parts) > 2 and parts[1] in GROUPS else parts[:2])


def runtime_imports() -> list[tuple[str, str]]:
    edges = []
    for path in SIDECAR.rglob("*.py"):
        relative = path.relative_to(SIDECAR).parts
        if relative[0] in ("tooling", "generated"):
            continue
        edges += [(module_of(path), name) for name in imported(path) if name.startswith("sidecar.")]
    return edges


def test_each_layer_imports_only_itself_and_those_below():
    upward = sorted(
        f"{source} imports {target}"
        for source, target in runtime_imports()
        if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(source))
    )
    assert upward == []


def test_no_two_packages_import_each_other_however_indirectly():
    graph: dict[str, set[str]] = {}
    for source, target in runtime_imports():
        a, b = package_of(source), package_of(target)
        if a != b:
            graph.setdefault(a, set()).add(b)
    assert len(graph) > 20
    cycles = []
    for start in graph:  # a package reaching itself again
        seen, stack = set(), list(graph[start])
        while stack:
            package = stack.pop()
            if package == start:
                cycles.append(start)
                break
            if package not in seen:
                seen.add(package)
                stack.extend(graph.get(package, ()))
    assert cycles == []


def test_admission_is_the_top_of_the_request_path():
    """Its director calls into every other package of the request path, so none of them
    imports it: only the composition root builds it."""
    admission = "sidecar.request.admission"
    importers = {
        package_of(source)
        for source, target in runtime_imports()
        if target.startswith(admission) and not source.startswith(admission)
    }
    assert importers == {"sidecar.deciders", "sidecar.server"}


def test_the_layout_page_shows_the_director_as_it_is():
    page = (SIDECAR.parent / "docs" / "layout.md").read_text()
    shown = page.split("```python\n", 1)[1].split("```", 1)[0]
    director = (SIDECAR / "request" / "admission" / "director.py").read_text()
    assert len(shown.splitlines()) > 15
    assert textwrap.indent(shown, " " * 8) in director


def test_admission_enters_queueing_through_its_one_entry():
    """Waiting has one owner: admission reaches the queueing package through waiting.py
    alone, and nothing there calls back up but through the protocol it defines."""
    admission, queueing = "sidecar.request.admission", "sidecar.request.queueing"
    entered = {
        target
        for source, target in runtime_imports()
        if source.startswith(admission) and target.startswith(queueing)
    }
    assert entered == {f"{queueing}.waiting"}
    upward = [
        (source, target)
        for source, target in runtime_imports()
        if source.startswith(queueing) and target.startswith(admission)
    ]
    assert upward == []
