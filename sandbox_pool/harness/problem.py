"""Load a reference problem (KernelBench format) from its source, in the trusted process."""

from __future__ import annotations

import hashlib
import types
from dataclasses import dataclass
from typing import Any, Callable

from cuda_agent.errors import ProblemError


@dataclass(frozen=True)
class Problem:
    """A loaded reference: the Model class and its input factories."""

    source: str
    sha256: str
    model_cls: type
    get_inputs: Callable[[], list[Any]]
    get_init_inputs: Callable[[], list[Any]]


def load_problem(source: str, name: str = "cuda_agent_reference") -> Problem:
    """Execute `source` in a fresh module namespace and pick Model / get_inputs / get_init_inputs."""
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    try:
        exec(compile(source, "model.py", "exec"), module.__dict__)  # trusted task code
    except Exception as exc:
        raise ProblemError(f"model.py failed to execute: {type(exc).__name__}: {exc}") from exc
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemError(f"model.py must define {', '.join(missing)} (KernelBench format)")
    return Problem(
        source=source,
        sha256=hashlib.sha256(source.encode()).hexdigest(),
        model_cls=module.Model,
        get_inputs=module.get_inputs,
        get_init_inputs=module.get_init_inputs,
    )


REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


def check_problem_source(source: str, filename: str = "model.py") -> None:
    """Statically check a reference problem without running it: it parses, defines `Model`,
    `get_inputs` and `get_init_inputs` at top level, and its top-level imports are installed.
    Raises `ProblemError` naming the file and what to fix."""
    import ast
    import importlib.util

    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise ProblemError(f"{filename} line {exc.lineno}: syntax error ({exc.msg}); fix the file") from None
    defined: set[str] = set()
    imported: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
            defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                imported.append(node.module)
            defined.update(alias.asname or alias.name for alias in node.names)
    missing = [name for name in REQUIRED_NAMES if name not in defined]
    if missing:
        raise ProblemError(f"{filename} does not define {', '.join(missing)} at top level; a problem needs "
                           f"{', '.join(REQUIRED_NAMES)} (KernelBench format, see examples/problems/)")
    for module in imported:
        root = module.split(".")[0]
        try:
            found = importlib.util.find_spec(root) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ProblemError(f"{filename} imports {module!r}, which is not installed here; install it or "
                               "remove the import")
