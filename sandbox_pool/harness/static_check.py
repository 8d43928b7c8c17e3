"""Static checks of a candidate before anything is compiled or run.

model_new.py may import only a few modules and may not reach Python internals (dunder
attributes, private torch modules, builtins that execute or introspect code): this
keeps the candidate's Python from patching the harness that runs in its process.
Kernel sources are scanned for the escape hatches of `policy.FORBIDDEN_SOURCE_PATTERNS`.
"""

from __future__ import annotations

import ast
import re

from cuda_agent.sandbox_pool.harness.policy import (
    ALLOWED_DUNDERS,
    ALLOWED_IMPORTS,
    FORBIDDEN_ATTRIBUTES,
    FORBIDDEN_BUILTINS,
    FORBIDDEN_SOURCE_PATTERNS,
    FORBIDDEN_TORCH_ATTRS,
)
from cuda_agent.sandbox_pool.workspace.layout import CANDIDATE_ENTRY, is_candidate_path


class StaticCheckReport:
    """Problems found: `errors` (unusable input) and `violations` (forbidden constructs)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.violations: list[str] = []

    @property
    def ok(self) -> bool:
        return not self.errors and not self.violations


def check_candidate(files: dict[str, str]) -> StaticCheckReport:
    """Check every candidate file; the report lists problems as the model should read them."""
    report = StaticCheckReport()
    for path in files:
        if not is_candidate_path(path):
            report.errors.append(f"{path}: only model_new.py and kernels/<file> may be submitted")
    if CANDIDATE_ENTRY not in files:
        report.errors.append("model_new.py is missing")
    else:
        _check_model_new(files[CANDIDATE_ENTRY], report)
    for path, text in sorted(files.items()):
        if path.startswith("kernels/"):
            code = _strip_comments(text)
            for pattern, why in FORBIDDEN_SOURCE_PATTERNS:
                match = pattern.search(code)
                if match:
                    line = code.count("\n", 0, match.start()) + 1
                    report.violations.append(f"{path}:{line}: `{match.group(0)}` is not allowed ({why})")
    return report


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _strip_comments(text: str) -> str:
    """C/C++ source without comments (newlines kept, so line numbers stay right)."""
    return _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _check_model_new(source: str, report: StaticCheckReport) -> None:
    try:
        tree = ast.parse(source, filename=CANDIDATE_ENTRY)
    except SyntaxError as exc:
        report.errors.append(f"model_new.py:{exc.lineno}: syntax error: {exc.msg}")
        return
    visitor = _ModelNewVisitor()
    visitor.visit(tree)
    report.violations.extend(visitor.violations)
    if not visitor.defines_model_new:
        report.errors.append("model_new.py does not define class ModelNew")


class _ModelNewVisitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.violations: list[str] = []
        self.defines_model_new = False

    def _flag(self, node: ast.AST, message: str) -> None:
        self.violations.append(f"model_new.py:{getattr(node, 'lineno', '?')}: {message}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in ALLOWED_IMPORTS:
                self._flag(node, f"import of `{alias.name}` is not allowed (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        if module not in ALLOWED_IMPORTS:
            self._flag(node, f"import from `{module}` is not allowed (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")
        for alias in node.names:
            if alias.name in FORBIDDEN_ATTRIBUTES or alias.name.startswith("_"):
                self._flag(node, f"`from {module} import {alias.name}` is not allowed in model_new.py")
        if module == "torch":
            for alias in node.names:
                if alias.name in FORBIDDEN_TORCH_ATTRS or alias.name.startswith("_"):
                    self._flag(node, f"`torch.{alias.name}` is not allowed in model_new.py")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "ModelNew":
            self.defines_model_new = True
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr in FORBIDDEN_ATTRIBUTES:
            self._flag(node, f"attribute `{attr}` is not allowed in model_new.py")
        elif attr in ALLOWED_DUNDERS:
            pass
        elif attr.startswith("__"):
            self._flag(node, f"dunder attribute `{attr}` is not allowed")
        elif attr.startswith("_") and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            self._flag(node, f"private attribute `{attr}` is not allowed (only on self)")
        elif isinstance(node.value, ast.Name) and node.value.id == "torch" and attr in FORBIDDEN_TORCH_ATTRS:
            self._flag(node, f"`torch.{attr}` is not allowed in model_new.py")
        elif isinstance(node.value, ast.Attribute) and node.value.attr == "cuda" and attr in ("Event", "Stream", "ExternalStream", "set_sync_debug_mode"):
            self._flag(node, f"`torch.cuda.{attr}` is not allowed in model_new.py")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_BUILTINS:
            self._flag(node, f"`{node.id}` is not allowed in model_new.py")
        elif node.id.startswith("__") and node.id not in ALLOWED_DUNDERS:
            self._flag(node, f"`{node.id}` is not allowed in model_new.py")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self._flag(node, "`global` state is not allowed in model_new.py (state across calls is caching)")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self._flag(node, "`nonlocal` is not allowed in model_new.py")
