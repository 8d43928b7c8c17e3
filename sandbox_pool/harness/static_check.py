"""Static checks of a candidate before anything is compiled or run.

model_new.py may import only a few modules and may not reach Python internals (dunder
attributes, private torch modules, builtins that execute or introspect code): this
keeps the candidate's Python from patching the harness that runs in its process.
Kernel sources are scanned for the escape hatches of `policy.FORBIDDEN_SOURCE_PATTERNS`, and
their preprocessor directives for files outside the build folder (`_file_violations`): the
compiler quotes an included file's lines in the errors the agent reads, and `.incbin` embeds one.
"""

from __future__ import annotations

import ast
import posixpath
import re

from cuda_agent.sandbox_pool.harness.policy import (
    INTERPRETER_ATTRIBUTES,
    ALLOWED_DUNDERS,
    ALLOWED_IMPORTS,
    FORBIDDEN_ATTRIBUTES,
    FORBIDDEN_BUILTINS,
    FORBIDDEN_SOURCE_PATTERNS,
    FORBIDDEN_TORCH_ATTRS,
    defence_tag,
)
from cuda_agent.sandbox_pool.harness.self_binding import SELF_NAMES, self_binding_violations
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
            report.violations += source_violations(path, _strip_comments(text))
            report.violations += _file_violations(path, text)
    return report


def source_violations(path: str, code: str, line_numbers: list[int] | None = None, note: str = "") -> list[str]:
    """The first match of each forbidden source pattern in `code` (comment-free text of `path`), as
    the model should read it. `line_numbers[i]` is the source line of `code`'s line i (default: i + 1):
    the compiler's expanded lines of a unit (expansion.py) are scanned with these same rules."""
    found = []
    for pattern, why in FORBIDDEN_SOURCE_PATTERNS:
        match = pattern.search(code)
        if match:
            index = code.count("\n", 0, match.start())
            line = line_numbers[index] if line_numbers else index + 1
            found.append(f"{path}:{line}: `{match.group(0)[:80]}` is not allowed ({why}{note}){defence_tag(why)}")
    return found


_DIRECTIVE = re.compile(r"^\s*(?:#|%:)\s*(include_next|include|import|embed|line\b|(?=\d))\s*(.*)$")
"""A file or line directive (`%:` is the digraph of `#`), on a logical line (continuations joined)."""
_JOINED_LITERALS = re.compile(r'"\s*"')


def _file_violations(path: str, text: str) -> list[str]:
    """Directives of kernel source `path` that would read a file outside the build folder: an
    absolute or escaping path, a computed include (a macro names the file), `#embed`, `#import`;
    and `.incbin` spelled across adjacent string literals. Line directives too: they would make the
    compiler attribute the candidate's lines to another file. The build folder holds the candidate's
    kernels/ and the harness's files next to it (`#include "../binding_registry.h"`). Lines are
    read as the preprocessor reads them: comments are one space, continuations join lines. Macros
    can still assemble an operand from parts the source never spells out: the compiler's file
    system view is the complete answer (docs/harness.md, Known limits)."""
    code = _COMMENT.sub(" ", text)
    found: list[str] = []
    logical, first = "", 1
    for number, physical in enumerate(code.split("\n"), start=1):
        if not logical:
            first = number
        if physical.rstrip("\r").endswith("\\"):
            logical += physical.rstrip("\r")[:-1]
            continue
        line, logical = logical + physical, ""
        match = _DIRECTIVE.match(line)
        if match is None:
            continue
        directive, operand = match.group(1), match.group(2).strip()
        why = _operand_violation(path, directive, operand)
        if why:
            found.append(f"{path}:{first}: `#{directive} {operand[:80]}` is not allowed ({why})")
    if hidden_incbin(code):
        found.append(f"{path}: `.incbin` is not allowed (reading files; in any case, or across string literals)")
    return found


def hidden_incbin(code: str) -> bool:
    """`.incbin` in another case or across adjacent string literals (`".inc" "bin"`): what the source pattern,
    which reads one lowercase spelling, does not see."""
    return bool(re.search(r"incbin", _JOINED_LITERALS.sub("", code), re.IGNORECASE)) and not re.search(r"incbin", code)


def _operand_violation(path: str, directive: str, operand: str) -> str | None:
    if directive in ("line", ""):  # `#line 7 "f"` and GNU's `# 7 "f"`
        return "a line directive: the build's expanded-source check reads which file each line is from"
    if directive in ("embed", "import"):
        return "reading files" if directive == "embed" else "not C++; use #include"
    if not operand or operand[0] not in "<\"":
        return "a computed include: name the header itself"
    closing = ">" if operand[0] == "<" else '"'
    end = operand.find(closing, 1)
    target = operand[1:end] if end > 0 else operand[1:]
    if target.startswith("/") or "\\" in target:
        return "a file outside the build folder"
    if operand[0] == "<":
        return "a file outside the build folder" if ".." in target.split("/") else None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return "a file outside the build folder" if resolved == ".." or resolved.startswith("../") else None


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
    report.violations.extend(f"model_new.py:{line}: {message}" for line, message in self_binding_violations(tree))
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
        for alias in node.names:  # `from torch.nn import utils` reaches what `torch.utils` does
            if alias.name in FORBIDDEN_TORCH_ATTRS:
                self._flag(node, f"`{module}.{alias.name}` is not allowed in model_new.py")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "ModelNew":
            self.defines_model_new = True
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        if isinstance(node.ctx, (ast.Store, ast.Del)) and not (
                isinstance(node.value, ast.Name) and node.value.id in SELF_NAMES):
            # `torch.equal = f`, `torch.Tensor.detach = f`, and `self.t.equal = f` after `self.t = torch`: code
            # the harness would run after the call (child/turns.py catches a function of model_new.py at run time
            # however the object was reached; a builtin put in another's place it does not: this does).
            self._flag(node, f"setting or deleting `.{attr}` on anything but the candidate's own object directly "
                             f"(`self.{attr} = ...`) is not allowed: model_new.py may not change torch or anything "
                             "else it did not make (set the attribute where the object is made)")
        on_the_model = isinstance(node.value, ast.Name) and node.value.id == "self"  # `self.f_scale` is the model's own
        if attr in FORBIDDEN_ATTRIBUTES or (attr in INTERPRETER_ATTRIBUTES and not on_the_model):
            self._flag(node, f"attribute `{attr}` is not allowed in model_new.py")
        elif attr in ALLOWED_DUNDERS:
            pass
        elif attr.startswith("__"):
            self._flag(node, f"dunder attribute `{attr}` is not allowed")
        elif attr.startswith("_") and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            self._flag(node, f"private attribute `{attr}` is not allowed (only on self)")
        elif attr in FORBIDDEN_TORCH_ATTRS and not on_the_model:
            # on any object but the model itself: torch is reached under other names too (`import torch as t`,
            # `torch.nn.functional.torch`, `self.t = torch`)
            self._flag(node, f"`.{attr}` is not allowed in model_new.py (torch's `{attr}`, however torch is reached)")
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
