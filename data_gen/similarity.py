"""AST normalisation and similarity of KernelBench-format sources (dedupe and decontamination).

Normal form: the pre-order walk of the module's AST as a list of tokens, in which
- user identifiers (variables, arguments, function / class names, ``self.<attribute>``) become ``ID``;
- numeric and string constants become ``CONST`` (True / False / None are kept), and so do the
  names of module-level constants (``batch_size = 16`` ... ``torch.randn(batch_size)``);
- docstrings, comments, formatting, type annotations, import statements, ``super().__init__()``
  and module-level constant assignments (``batch_size = 16``) disappear;
- library references are resolved through import aliases to their full path, so ``F.relu``,
  ``torch.nn.functional.relu`` and ``from torch.nn.functional import relu; relu`` are one token;
- the KernelBench protocol names (Model, forward, get_inputs, ...) are kept.
Operation tokens — library paths, method names called on values (``x.sum``) and arithmetic /
comparison operators — are marked with a leading ``@``.

Similarity: difflib's `SequenceMatcher` aligns the two token lists (autojunk off); the score is
the weighted ratio 2·W(matched) / (W(a) + W(b)), where an operation token weighs
`OPERATION_WEIGHT` and any other token 1. With equal weights this is `SequenceMatcher.ratio()`;
the extra weight keeps two tasks that share the KernelBench boilerplate but apply different
operators apart (the nn.ReLU and nn.GELU seeds score 0.88, not 0.97), while a renamed,
re-sized or reformatted copy still scores 1.0. It is a cheap proxy for tree edit distance.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

PROTOCOL_NAMES = frozenset({"Model", "ModelNew", "forward", "__init__", "get_inputs", "get_init_inputs", "super"})
OPERATION_WEIGHT = 6.0
_SKIP_NODES = (ast.Load, ast.Store, ast.Del)
_OPERATORS = (ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


class _Normaliser:
    def __init__(self, constants: frozenset[str] = frozenset()) -> None:
        self.aliases: dict[str, str] = {}
        self.constants = constants

    def imports(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    root = alias.name.split(".", 1)[0]
                    self.aliases[alias.asname or root] = alias.name if alias.asname else root
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def dotted(self, node: ast.expr) -> str | None:
        """Full library path of a Name / Attribute chain rooted at an imported name, else None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def tokens(self, node: ast.AST) -> Iterator[str]:
        if isinstance(node, _SKIP_NODES) or _is_boilerplate(node):
            return
        if isinstance(node, _OPERATORS):
            yield "@" + type(node).__name__
        elif isinstance(node, (ast.Name, ast.Attribute)) and (path := self.dotted(node)):
            yield "@" + path
        elif isinstance(node, ast.Name):
            yield node.id if node.id in PROTOCOL_NAMES else "CONST" if node.id in self.constants else "ID"
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            yield "self." + (node.attr if node.attr in PROTOCOL_NAMES else "ID")
        elif isinstance(node, ast.Attribute):
            yield "@." + node.attr
            yield from self.tokens(node.value)
        elif isinstance(node, ast.Constant):
            yield repr(node.value) if node.value is None or isinstance(node.value, bool) else "CONST"
        elif isinstance(node, ast.arg):
            yield "arg"
        else:
            yield type(node).__name__
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield node.name if node.name in PROTOCOL_NAMES else "ID"
            elif isinstance(node, ast.keyword):
                yield node.arg or "**"
            yield from self._children(node)

    def _children(self, node: ast.AST) -> Iterator[str]:
        for name, value in ast.iter_fields(node):
            if name in ("annotation", "returns", "type_comment", "type_params"):
                continue
            children = value if isinstance(value, list) else [value]
            for position, child in enumerate(children):
                if not isinstance(child, ast.AST):
                    continue
                if name == "body" and position == 0 and _is_docstring(child):
                    continue
                yield from self.tokens(child)


class _Inliner(ast.NodeTransformer):
    """Forward-substitutes straight-line temporaries: ``x = f(x); x = g(x); return x`` -> ``return g(f(x))``.

    Only in function bodies made of plain statements (no loops, branches or with-blocks), so the
    normal form does not depend on how many temporaries an author used.
    """

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        simple = (ast.Assign, ast.Return, ast.Expr)
        if not all(isinstance(stmt, simple) for stmt in node.body):
            return node
        pending: dict[str, ast.expr] = {}
        body: list[ast.stmt] = []
        for stmt in node.body:
            stmt = _Substitute(pending).visit(stmt)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                pending[stmt.targets[0].id] = stmt.value
            else:
                body.append(stmt)
        node.body = body or node.body
        return node


class _Substitute(ast.NodeTransformer):
    def __init__(self, pending: dict[str, ast.expr]) -> None:
        self.pending = pending

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if isinstance(node.ctx, ast.Load) and node.id in self.pending:
            return self.pending[node.id]
        return node


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _is_boilerplate(node: ast.AST) -> bool:
    """Imports and ``super(...).__init__(...)`` calls."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        return (isinstance(func, ast.Attribute) and func.attr == "__init__" and isinstance(func.value, ast.Call)
                and isinstance(func.value.func, ast.Name) and func.value.func.id == "super")
    return False


def _is_module_constant(node: ast.stmt) -> bool:
    value = getattr(node, "value", None)
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or value is None:
        return False
    return all(isinstance(n, (ast.Constant, ast.Tuple, ast.List, ast.UnaryOp, ast.BinOp, ast.Name, ast.operator,
                              ast.unaryop, ast.Load)) for n in ast.walk(value))


def _assigned_names(statements: list[ast.stmt]) -> frozenset[str]:
    names = set()
    for stmt in statements:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]  # type: ignore[attr-defined]
        for target in targets:
            names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return frozenset(names)


def normalized_tokens(source: str) -> list[str]:
    """The normal form of `source` (raises SyntaxError if it does not parse)."""
    tree = _Inliner().visit(ast.parse(source))
    constants = [s for s in tree.body if _is_module_constant(s)]
    normaliser = _Normaliser(_assigned_names(constants))
    normaliser.imports(tree)
    body = [s for s in tree.body if not _is_docstring(s) and not _is_module_constant(s)]
    return [token for stmt in body for token in normaliser.tokens(stmt)]


def normalized_hash(source: str) -> str:
    """SHA-256 of the normal form: equal for sources that differ only in names, constants and layout."""
    return hashlib.sha256("\x1f".join(normalized_tokens(source)).encode()).hexdigest()


def weight(token: str) -> float:
    return OPERATION_WEIGHT if token.startswith("@") else 1.0


@dataclass
class Fingerprint:
    """Normal form of one source plus what the similarity bound needs."""

    tokens: list[str]
    counts: Counter[str] = field(init=False)
    total: float = field(init=False)

    def __post_init__(self) -> None:
        self.counts = Counter(self.tokens)
        self.total = sum(weight(t) * n for t, n in self.counts.items())

    @classmethod
    def of(cls, source: str) -> Fingerprint:
        return cls(normalized_tokens(source))


def _weighted_ratio(matched: float, a: Fingerprint, b: Fingerprint) -> float:
    total = a.total + b.total
    return 2.0 * matched / total if total else 1.0


def similarity(a: Fingerprint, b: Fingerprint) -> float:
    """Weighted SequenceMatcher ratio of two normal forms, in [0, 1]."""
    matcher = difflib.SequenceMatcher(None, a.tokens, b.tokens, autojunk=False)
    matched = sum(weight(t) for block in matcher.get_matching_blocks() for t in a.tokens[block.a:block.a + block.size])
    return _weighted_ratio(matched, a, b)


def _upper_bound(a: Fingerprint, b: Fingerprint) -> float:
    common = sum(weight(t) * min(n, b.counts[t]) for t, n in a.counts.items() if t in b.counts)
    return _weighted_ratio(common, a, b)


def nearest(query: Fingerprint, references: Sequence[Fingerprint]) -> tuple[int, float]:
    """Index and similarity of the most similar reference ((-1, 0.0) when there is none).

    Exact: references are visited in decreasing order of a multiset upper bound of the score,
    and the scan stops once no bound can beat the best score found.
    """
    bounds = sorted(((_upper_bound(query, ref), i) for i, ref in enumerate(references)), reverse=True)
    best_index, best = -1, 0.0
    for bound, index in bounds:
        if bound <= best:
            break
        score = similarity(query, references[index])
        if score > best:
            best_index, best = index, score
    return best_index, best
