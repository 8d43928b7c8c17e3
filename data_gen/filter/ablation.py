"""Operator ablation: the task's source with one operation of `forward` removed.

Every call, binary and unary operation in ``Model.forward`` is a candidate: a call is replaced
by its tensor argument (the receiver of a method call ``x.sum(1)``, else the first positional
argument: ``torch.relu(self.conv(x))`` -> ``self.conv(x)``), a binary operation by either
operand, a unary one by its operand (operations inside an if / else branch are left alone: eager
may never run them). The filter runs each variant with the same parameters and
inputs; one whose output stays within tolerance means the operator is dead (nothing a candidate
must compute). Variants that fail to run or change the shape mean the operator matters.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass

NOOP_METHODS = frozenset({
    "contiguous", "clone", "detach", "float", "to", "type_as", "cpu", "cuda", "size", "dim", "numel",
    "requires_grad_", "item", "tolist",
})
"""Calls that are no operator of the task (layout / type plumbing, shape queries): never ablated."""


@dataclass(frozen=True)
class Ablation:
    """One variant of the source."""

    removed: str
    """The removed expression, as source text."""
    line: int
    source: str


def _forward(tree: ast.Module) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return item
    return None


def _replacements(node: ast.AST) -> list[ast.expr]:
    """Expressions `node` may be replaced by (empty when it is not an ablatable operation)."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in NOOP_METHODS:
            return []
        if isinstance(func, ast.Name) and func.id in ("super", "len", "range", "int", "float", "isinstance"):
            return []
        receiver = func.value if isinstance(func, ast.Attribute) else None
        if receiver is not None and not _is_namespace(receiver):
            return [receiver]
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        return positional[:1]
    if isinstance(node, ast.BinOp) and not (_literal(node.left) and _literal(node.right)):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Invert)) and not _literal(node.operand):
        return [node.operand]
    return []


def _literal(node: ast.expr) -> bool:
    """A number written in the source (``-1`` in ``dim=-1`` is a constant, not an operation)."""
    return isinstance(node, ast.Constant) or (isinstance(node, ast.UnaryOp) and _literal(node.operand))


def _is_namespace(node: ast.expr) -> bool:
    """True for ``torch``, ``F``, ``torch.nn.functional``, ``self``, ``self.conv`` ...: not a tensor receiver."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and (node.id in ("torch", "F", "nn", "self", "math") or node.id[:1].isupper())


def _conditional(forward: ast.FunctionDef) -> set[int]:
    """Ids of nodes inside a branch (if / else, a conditional expression): eager may never run them."""
    inside: set[int] = set()
    for node in ast.walk(forward):
        if isinstance(node, (ast.If, ast.IfExp)):
            branches = node.body if isinstance(node.body, list) else [node.body]
            branches += node.orelse if isinstance(node.orelse, list) else [node.orelse]
            inside |= {id(n) for branch in branches for n in ast.walk(branch)}
    return inside


def _candidates(forward: ast.FunctionDef) -> list[ast.AST]:
    """Ablatable operations of forward outside branches, in source order."""
    skip = _conditional(forward)
    return sorted((n for n in ast.walk(forward) if id(n) not in skip and _replacements(n)),
                  key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))


class _Replace(ast.NodeTransformer):
    def __init__(self, target: ast.AST, replacement: ast.expr) -> None:
        self.target, self.replacement = target, replacement

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if node is self.target:
            return self.replacement
        return super().generic_visit(node)


def _describe(node: ast.AST) -> str:
    """The removed operation: ``torch.relu``, ``.sum``, ``*`` ..., in its expression."""
    if isinstance(node, ast.Call):
        func = node.func
        method = isinstance(func, ast.Attribute) and not _is_namespace(func.value)
        name = f".{func.attr}" if isinstance(func, ast.Attribute) and method else ast.unparse(func)
    else:
        name = type(getattr(node, "op", node)).__name__
    return f"{name} in {ast.unparse(node)[:100]}"


def ablations(source: str, limit: int = 16) -> Iterator[Ablation]:
    """Up to `limit` variants of `source`, each without one operation of forward (source order)."""
    tree = ast.parse(source)
    forward = _forward(tree)
    if forward is None:
        return
    nodes = _candidates(forward)
    made = 0
    for position, node in enumerate(nodes):
        for choice in range(len(_replacements(node))):
            if made >= limit:
                return
            variant = copy.deepcopy(tree)
            variant_forward = _forward(variant)
            assert variant_forward is not None
            target = _candidates(variant_forward)[position]
            replaced = _Replace(target, _replacements(target)[choice]).visit(variant)
            made += 1
            yield Ablation(removed=_describe(node), line=getattr(node, "lineno", 0),
                           source=ast.unparse(ast.fix_missing_locations(replaced)) + "\n")
