"""AST normalisation and similarity of KernelBench-format sources (dedupe and decontamination).

Normal form: the pre-order walk of the module's AST as a list of tokens, written so that two
sources meaning the same computation get the same tokens:
- user identifiers (variables, arguments, function / class names, ``self.<attribute>``) become ``ID``;
  numeric and string constants and the names of module-level constants become ``CONST``;
- docstrings, comments, formatting, type annotations, imports, ``super().__init__()`` and
  module-level constant assignments disappear; straight-line temporaries are inlined;
- ``get_inputs`` / ``get_init_inputs`` reduce to the number of values they return, and every
  tensor maker (``torch.randn``, ``rand``, ``randint``, ``zeros``, ``*_like``, ...) to ``@gen``: how
  inputs are drawn and how big they are says nothing about the problem;
- every operator has one canonical name whatever the spelling: library paths through import
  aliases (``F.relu`` = ``torch.nn.functional.relu``), the ``nn`` module form (``self.act =
  nn.ReLU()`` ... ``self.act(x)``, the constructor statement dropped) = the functional form
  (``torch.relu(x)``) = the method form (``x.relu()``); aliases (``mm``/``bmm``/``@`` = ``matmul``,
  ``clip`` = ``clamp``, ...); arithmetic operators become calls (``x * y`` = ``torch.mul(x, y)``),
  ``x / 2`` = ``x * 0.5``, ``x - 1`` = ``x + -1``, ``2 * x`` = ``x * 2``; keyword names are dropped
  (``sum(x, dim=1)`` = ``x.sum(1)``).
Operation tokens are marked with a leading ``@``.

Similarity: difflib's `SequenceMatcher` aligns the two token lists (autojunk off); the score is
the weighted ratio 2·W(matched) / (W(a) + W(b)), where an operation token weighs
`OPERATION_WEIGHT` and any other token 1. The weight keeps two tasks that share the
KernelBench boilerplate but apply different operators apart (one operator changed in a
four-operator chain scores about 0.88), while a renamed, re-sized, re-spelt copy scores
about 1.0. It is a cheap proxy for tree edit distance. Limits: default arguments written out
(``keepdim=False``) and reordered independent statements still lower the score.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

PROTOCOL_NAMES = frozenset({"Model", "ModelNew", "forward", "__init__", "get_inputs", "get_init_inputs", "super"})
OPERATION_WEIGHT = 10.0
NORMAL_FORM_VERSION = 2
"""Bumped when the normal form changes: stored similarities of an older version are recomputed."""
LIBRARIES = frozenset({"torch", "transformers", "math", "numpy"})
_SKIP_NODES = (ast.Load, ast.Store, ast.Del)
_COMPARE = (ast.cmpop, ast.boolop)

GENERATORS = frozenset({
    "randn", "rand", "randint", "randnlike", "randlike", "randintlike", "randperm", "normal", "uniform", "empty",
    "zeros", "ones", "full", "emptylike", "zeroslike", "oneslike", "fulllike", "tensor", "arange", "linspace",
    "bernoulli", "multinomial",
})
"""Tensor makers (canonical names): in get_inputs or __init__ they only say "an input / a parameter goes here"."""
ALIASES = {
    "mm": "matmul", "bmm": "matmul", "multiply": "mul", "truedivide": "div", "divide": "div", "subtract": "sub",
    "clip": "clamp", "absolute": "abs", "concatenate": "cat", "concat": "cat", "swapaxes": "transpose",
    "negative": "neg", "arccos": "acos", "arcsin": "asin", "arctan": "atan", "arctanh": "atanh", "greater": "gt",
    "less": "lt", "greaterequal": "ge", "lessequal": "le", "notequal": "ne", "fix": "trunc", "swish": "silu",
    "linalgnorm": "norm", "special.expit": "sigmoid", "expit": "sigmoid", "amax": "max", "amin": "min",
}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul", ast.Pow: "pow",
           ast.FloorDiv: "floordiv", ast.Mod: "remainder", ast.BitAnd: "bitwiseand", ast.BitOr: "bitwiseor",
           ast.BitXor: "bitwisexor", ast.LShift: "lshift", ast.RShift: "rshift"}
_UNARY = {ast.USub: "neg", ast.Invert: "bitwisenot", ast.Not: "logicalnot", ast.UAdd: None}


def canonical(name: str) -> str:
    """One name per operator: ``F.leaky_relu``, ``nn.LeakyReLU``, ``x.leaky_relu_`` -> ``leakyrelu``."""
    last = name.rsplit(".", 1)[-1].lower().replace("_", "")
    if "norm" in last and last[-2:] in ("1d", "2d", "3d"):
        last = last[:-2]  # BatchNorm2d ~ F.batch_norm
    return ALIASES.get(last, last)


def _is_constant(node: ast.expr, constants: frozenset[str]) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _is_constant(node.operand, constants)
    return isinstance(node, ast.Name) and node.id in constants


class _Normaliser:
    def __init__(self, constants: frozenset[str] = frozenset()) -> None:
        self.aliases: dict[str, str] = {}
        self.constants = constants
        self.modules: dict[str, str] = {}
        """``self.<attr>`` -> canonical operator, for attributes holding a library module that forward calls."""
        self.module_args: dict[str, int] = {}
        """Constructor arguments of those modules: ``nn.LeakyReLU(0.2)`` ~ ``F.leaky_relu(x, 0.2)``."""
        self.dropped: set[int] = set()
        """Ids of ``self.<attr> = nn.X(...)`` statements of __init__ (the functional form has none)."""
        self.in_get_inputs = False

    def imports(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    root = alias.name.split(".", 1)[0]
                    self.aliases[alias.asname or root] = alias.name if alias.asname else root
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def module_attributes(self, tree: ast.Module) -> None:
        """Map ``self.relu = nn.ReLU()`` (called as ``self.relu(x)`` in forward) to the operator ``relu``."""
        called: set[str] = set()
        assigned: dict[str, tuple[ast.stmt, str]] = {}
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, ast.Call) and _self_attr(node.func):
                    called.add(_self_attr(node.func) or "")
                if (isinstance(node, ast.Assign) and len(node.targets) == 1 and _self_attr(node.targets[0])
                        and isinstance(node.value, ast.Call) and (path := self.dotted(node.value.func))
                        and path.split(".", 1)[0] in LIBRARIES and path.rsplit(".", 1)[-1][:1].isupper()):
                    assigned[_self_attr(node.targets[0]) or ""] = (node, canonical(path))
        for attr, (statement, op) in assigned.items():
            if attr in called:
                self.modules[attr] = op
                ctor = statement.value  # type: ignore[attr-defined]
                self.module_args[attr] = len(ctor.args) + len(ctor.keywords)
                self.dropped.add(id(statement))

    def dotted(self, node: ast.expr) -> str | None:
        """Full library path of a Name / Attribute chain rooted at an imported name, else None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def tokens(self, node: ast.AST) -> Iterator[str]:
        if isinstance(node, _SKIP_NODES) or _is_boilerplate(node) or id(node) in self.dropped:
            return
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            yield from self._get_inputs(node)
        elif isinstance(node, ast.Call):
            yield from self._call(node)
        elif isinstance(node, ast.BinOp):
            yield from self._binop(node)
        elif isinstance(node, ast.UnaryOp):
            op = _UNARY.get(type(node.op))
            if op is None or _is_constant(node, self.constants):
                yield from self.tokens(node.operand) if op is None else iter(["CONST"])
            else:
                yield from ("Call", "@" + op, *self.tokens(node.operand))
        elif isinstance(node, _COMPARE):
            yield "@" + type(node).__name__
        elif isinstance(node, (ast.Name, ast.Attribute)) and (path := self.dotted(node)):
            yield "@" + canonical(path)
        elif isinstance(node, ast.Name):
            yield node.id if node.id in PROTOCOL_NAMES else "CONST" if node.id in self.constants else "ID"
        elif isinstance(node, ast.Attribute) and (attr := _self_attr(node)) is not None:
            yield "@" + self.modules[attr] if attr in self.modules else "self." + (
                attr if attr in PROTOCOL_NAMES else "ID")
        elif isinstance(node, ast.Attribute):
            yield "@" + canonical(node.attr)
            yield from self.tokens(node.value)
        elif isinstance(node, ast.Constant):
            yield repr(node.value) if node.value is None or isinstance(node.value, bool) else "CONST"
        elif isinstance(node, ast.arg):
            yield "arg"
        elif isinstance(node, ast.keyword):
            yield from self.tokens(node.value)  # f(x, dim=1) ~ f(x, 1)
        else:
            yield type(node).__name__
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield node.name if node.name in PROTOCOL_NAMES else "ID"
            yield from self._children(node)

    def _call(self, node: ast.Call) -> Iterator[str]:
        func = node.func
        path = self.dotted(func)
        if path is not None and canonical(path) in GENERATORS:
            yield "@gen"  # torch.randn(B, C) ~ torch.rand(b, c, h): shapes and distributions say nothing
            return
        yield "Call"
        if isinstance(func, ast.Attribute) and path is None and _self_attr(func) is None:
            yield "@" + canonical(func.attr)  # x.sum(1) ~ torch.sum(x, 1): the receiver is the first argument
            yield from self.tokens(func.value)
        else:
            yield from self.tokens(func)
        for child in (*node.args, *node.keywords):
            yield from self.tokens(child)
        if (attr := _self_attr(func)) is not None and attr in self.modules:
            yield from ["CONST"] * self.module_args[attr]

    def _binop(self, node: ast.BinOp) -> Iterator[str]:
        op = _BINOPS.get(type(node.op), type(node.op).__name__.lower())
        left, right = node.left, node.right
        if op in ("div", "sub") and _is_constant(right, self.constants):
            op = "mul" if op == "div" else "add"  # x / 2 ~ x * 0.5, x - 1 ~ x + (-1)
        if op in ("add", "mul") and _is_constant(left, self.constants) and not _is_constant(right, self.constants):
            left, right = right, left  # 2 * x ~ x * 2
        yield from ("Call", "@" + op, *self.tokens(left), *self.tokens(right))

    def _get_inputs(self, node: ast.FunctionDef) -> Iterator[str]:
        """get_inputs / get_init_inputs say how many values there are, not how they are drawn or spelt."""
        yield from ("FunctionDef", node.name)
        returned = next((s.value for s in node.body if isinstance(s, ast.Return)), None)
        if isinstance(returned, (ast.List, ast.Tuple)):
            yield from ["INPUT"] * len(returned.elts)
        else:
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


def _self_attr(node: ast.AST) -> str | None:
    """``attr`` of ``self.attr``, else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


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
    normaliser.module_attributes(tree)
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
