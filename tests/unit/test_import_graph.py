"""No import circle anywhere in lbtune/: every import statement counts, wherever it sits.

import-linter sees only the imports a module makes when it loads; an import written inside a
function (or under ``if TYPE_CHECKING:``) is just as much a tie between two modules, and the
usual reason to write one is to hide a circle. This test reads every module with ``ast``,
takes every import (top level, in functions, in type-checking blocks), and fails on any cycle,
naming the modules and the line of each import that closes it.

A module named in a string (the CLI's lazy command table, a guest entry point run in another
process) is loaded by name, not imported by the module that names it: no tie here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lbtune

PACKAGE_DIR = Path(lbtune.__file__).parent


def _modules() -> dict[str, Path]:
    """Every module of lbtune/ by dotted name (a package by its own name, from __init__.py)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = ["lbtune", *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The modules of lbtune that ``name`` imports, each with the line of its first import."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    targets: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        # Importing a.b.c runs a/__init__ and a/b/__init__ first; a package that is an
        # ancestor of the importer is already loading, so only the others are ties.
        parts = target.split(".")
        for end in range(1, len(parts) + 1):
            step = ".".join(parts[:end])
            if step in modules and step != name and not name.startswith(step + "."):
                targets.setdefault(step, line)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "lbtune":
                    add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "lbtune":
                continue
            for alias in node.names:
                # ``from x import y`` ties to x.y when y is a module, else to x.
                submodule = f"{source}.{alias.name}"
                add(submodule if submodule in modules else source, node.lineno)
    return targets


def import_graph() -> dict[str, dict[str, int]]:
    """Module -> {imported module: line} for every module of lbtune/."""
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def _describe(group: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(group)
    lines = [f"circle of {len(group)} modules:"]
    for name in group:
        ties = [f"{t} (line {ln})" for t, ln in sorted(graph[name].items()) if t in members]
        lines.append(f"  {name} imports {', '.join(ties)}")
    return "\n".join(lines)


def test_the_graph_sees_imports_inside_functions() -> None:
    # cli/main imports the signal guard inside the function that needs it.
    assert "lbtune.host.signals" in import_graph()["lbtune.cli.main"]


def test_no_import_circle() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "\n".join(_describe(group, graph) for group in found)
