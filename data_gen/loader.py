"""Loading KernelBench-format sources: static checks and import as a module.

Sources are imported from a real file (not `exec` of a string) so that `inspect`,
tracebacks and `torch.compile` see the code. Only trusted processes import our own seeds;
the filter imports every task inside a throw-away child process.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
import tempfile
import types
from pathlib import Path

from cuda_agent.errors import ProblemError

REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")
_MODULE_DIR: Path | None = None


def check_source(source: str) -> ast.Module:
    """Parse `source` and check the KernelBench contract; raises ProblemError naming what is missing."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProblemError(f"source does not parse: {exc}") from exc
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    if "Model" not in classes:
        raise ProblemError("source defines no top-level class Model")
    methods = {node.name for node in classes["Model"].body if isinstance(node, ast.FunctionDef)}
    missing = [name for name in ("__init__", "forward") if name not in methods]
    missing += [name for name in REQUIRED_FUNCTIONS if name not in functions]
    if missing:
        raise ProblemError(f"source lacks {', '.join(missing)} (KernelBench format: Model, get_inputs, get_init_inputs)")
    return tree


def _module_dir() -> Path:
    global _MODULE_DIR
    if _MODULE_DIR is None:
        _MODULE_DIR = Path(tempfile.mkdtemp(prefix="cuda_agent_tasks_"))
    return _MODULE_DIR


def import_source(source: str, name: str | None = None) -> types.ModuleType:
    """Import `source` as a fresh module (checked first); raises ProblemError if it cannot be loaded."""
    check_source(source)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"cuda_agent_task_{name or digest}".replace(".", "_").replace("-", "_")
    path = _module_dir() / f"{module_name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - only for exotic import systems
        raise ProblemError(f"cannot create an import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the task's own code failed: report it as the task's problem
        sys.modules.pop(module_name, None)
        raise ProblemError(f"importing the task failed: {type(exc).__name__}: {exc}") from exc
    return module
