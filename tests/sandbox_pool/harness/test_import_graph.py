"""Issue 37: no circle in the harness's import graph, counting every import (module level, inside functions,
under TYPE_CHECKING): a module that needs another's caller gets what it needs as an argument instead."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[3] / "sandbox_pool" / "harness"
PACKAGE = "cuda_agent.sandbox_pool.harness"


def _modules() -> dict[str, Path]:
    """Dotted names below the harness ('' for its __init__) -> source file."""
    modules = {}
    for path in HARNESS.rglob("*.py"):
        parts = path.relative_to(HARNESS).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The harness modules `path` imports anywhere in it (a name imported from a package that is a module of
    its own counts as that module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            base = node.module[len(PACKAGE):].lstrip(".")
            for alias in node.names:
                name = f"{base}.{alias.name}".lstrip(".")
                found.add(name if name in modules else base)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE):
                    found.add(alias.name[len(PACKAGE):].lstrip("."))
    return {name for name in found if name in modules}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return circles


def test_the_harness_imports_no_circle() -> None:
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    assert graph["evaluator"] and "session" in graph["evaluator"], "the graph is not what this test believes"
    assert _circles(graph) == []


def test_a_circle_is_found() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
