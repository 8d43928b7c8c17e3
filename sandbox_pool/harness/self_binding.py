"""`self` in model_new.py is always one of the candidate's own objects.

The static rules trust `self.`: on it, private names (`self._cache`), interpreter-looking names
(`self.f_scale`) and torch's refused names (`self.ops`) are the model's own attributes, and only
`self.x = ...` may set one. That trust holds only if `self` can be bound to nothing but an instance
of a class model_new.py defines. Python binds it to anything a function is called with:
`Helper.grab(torch)` makes `def grab(self): return self._C` return `torch._C`, and from there the
dispatcher's mode stack (the compute guard popped, a torch fallback rewarded 3: red team,
2026-12-04). So the ways a function with a `self` (or `cls`) parameter can get another first
argument are refused, as classes rather than spellings:

- `self` / `cls` may only be the first parameter of a method: a function defined directly in a
  class body, not a `staticmethod`; nowhere else a parameter (lambdas, nested or module-level
  functions, later or keyword parameters), never assigned, deleted, imported or caught as, and never
  read where no such method binds it;
- a method's function object never leaves its class: a class of model_new.py is only called,
  subclassed, or named to `super` / `isinstance` / `issubclass`; of its attributes only the plain
  values its body (or a base of model_new.py) assigns, its staticmethods and its classmethods are read
  (`Tiles.BLOCK`, `Tiles.make(...)`, not `Tiles.grab`);
  the class body does not name its own methods (`g = grab`, `@grab`); and a method's decorators are
  only Python's `classmethod` / `property` (and `.setter` / `.getter` / `.deleter`) or torch's own
  (`torch.no_grad()`): any other decorator receives the function itself.

What is left is Python's own binding: an instance's method called on it, a classmethod on its class.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

SELF_NAMES: frozenset[str] = frozenset({"self", "cls"})
"""The parameter names the static rules trust as the candidate's own object."""

CLASS_NAME_USES: frozenset[str] = frozenset({"super", "isinstance", "issubclass"})
"""Builtins a class of model_new.py may be named to (besides calling and subclassing it)."""

METHOD_DECORATORS: frozenset[str] = frozenset({"classmethod", "property"})
PROPERTY_PARTS: frozenset[str] = frozenset({"setter", "getter", "deleter"})


def self_binding_violations(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, message) for every way model_new.py could call a method with a foreign `self`."""
    checker = _SelfBinding(tree)
    checker.visit(tree)
    return checker.found


class _SelfBinding(ast.NodeVisitor):
    def __init__(self, tree: ast.Module) -> None:
        self.found: list[tuple[int, str]] = []
        self.classes: dict[str, ast.ClassDef] = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        self._bound: list[frozenset[str]] = [frozenset()]  # self/cls names bound in the current scope chain
        self._allowed_class_refs: set[int] = set()  # ids of Name nodes naming a class in an allowed place

    def _flag(self, node: ast.AST, message: str) -> None:
        self.found.append((getattr(node, "lineno", 0), message))

    # -- scopes -------------------------------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if isinstance(base, ast.Name):
                self._allowed_class_refs.add(id(base))
        for keyword in node.keywords:
            if keyword.arg == "metaclass":
                self._flag(keyword.value, "a metaclass is not allowed in model_new.py")
        self._check_class_body(node)
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._visit_function(statement, in_class_body=True)
            else:
                self.visit(statement)
        for decorator in node.decorator_list:
            self.visit(decorator)
        for expr in (*node.bases, *node.keywords):
            self.visit(expr)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._visit_function(node, in_class_body=False)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for arg in _parameters(node.args):
            if arg.arg in SELF_NAMES:
                self._flag(node, f"`{arg.arg}` may only name the first parameter of a method (not a lambda's)")
        self._visit_arguments(node.args)
        self._bound.append(self._bound[-1] - {a.arg for a in _parameters(node.args)})
        self.visit(node.body)
        self._bound.pop()

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, *, in_class_body: bool) -> None:
        if node.name in SELF_NAMES:
            self._flag(node, f"a function may not be named `{node.name}` in model_new.py")
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
        positional = [*node.args.posonlyargs, *node.args.args]
        first = positional[0].arg if positional else None
        binds = first if (in_class_body and not static and first in SELF_NAMES) else None
        for arg in _parameters(node.args):
            if arg.arg in SELF_NAMES and not (binds and arg is positional[0]):
                where = "a staticmethod" if static and in_class_body else (
                    "a function outside a class body" if not in_class_body else "a later parameter")
                self._flag(node, f"`{arg.arg}` may only name the first parameter of a method, not of {where} "
                                 f"(`{node.name}`): `self` is always the candidate's own object")
        if binds:
            for decorator in node.decorator_list:
                if not _method_decorator(decorator):
                    self._flag(decorator, f"decorator of method `{node.name}`: only classmethod, property (and "
                                          "its setter/getter/deleter) or torch's own decorators may wrap a method "
                                          "(any other receives the function and may call it with any `self`)")
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._visit_arguments(node.args)
        if node.returns is not None:
            self._visit_annotation(node.returns)
        names = {a.arg for a in _parameters(node.args)}
        self._bound.append((self._bound[-1] - names) | ({binds} if binds else frozenset()))
        for statement in node.body:
            self.visit(statement)
        self._bound.pop()

    def _visit_arguments(self, args: ast.arguments) -> None:
        for default in (*args.defaults, *[d for d in args.kw_defaults if d is not None]):
            self.visit(default)
        for arg in _parameters(args):
            if arg.annotation is not None:
                self._visit_annotation(arg.annotation)

    def _visit_annotation(self, node: ast.expr) -> None:
        if isinstance(node, ast.Name):  # `x: Tiles` names the class, nothing more
            self._allowed_class_refs.add(id(node))
        self.visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._visit_annotation(node.annotation)
        self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    # -- names ----------------------------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in SELF_NAMES:
            if not isinstance(node.ctx, ast.Load):
                self._flag(node, f"`{node.id}` may not be assigned or deleted in model_new.py")
            elif node.id not in self._bound[-1]:
                self._flag(node, f"`{node.id}` is read where no method binds it (model_new.py's `self` is only a "
                                 "method's first parameter)")
        elif node.id in self.classes and id(node) not in self._allowed_class_refs:
            self._flag(node, f"class `{node.id}` may only be called, subclassed or named to super/isinstance/"
                             "issubclass (its methods called with another `self` would pass for the model's)")

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            if node.func.id in self.classes:
                self._allowed_class_refs.add(id(node.func))
            elif node.func.id in CLASS_NAME_USES:
                for arg in node.args:
                    for name in _names_in(arg):
                        self._allowed_class_refs.add(id(name))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in self.classes:
            if node.attr in self._plain_values(node.value.id):
                self._allowed_class_refs.add(id(node.value))
            else:
                self._flag(node, f"`{node.value.id}.{node.attr}`: of a class of model_new.py only the plain values "
                                 "its body assigns may be read (a method read off the class can be called with any "
                                 "`self`); call it on an instance")
                self._allowed_class_refs.add(id(node.value))  # one message for the whole reference
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name in SELF_NAMES:
            self._flag(node, f"`{node.name}` may not be assigned in model_new.py")
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:
        if (node.asname or node.name) in SELF_NAMES:
            self._flag(node, f"`{node.asname or node.name}` may not be assigned in model_new.py")

    def visit_MatchAs(self, node: ast.AST) -> None:
        self._match_capture(node, getattr(node, "name", None))

    def visit_MatchStar(self, node: ast.AST) -> None:
        self._match_capture(node, getattr(node, "name", None))

    def visit_MatchMapping(self, node: ast.AST) -> None:
        self._match_capture(node, getattr(node, "rest", None))

    def _match_capture(self, node: ast.AST, name: str | None) -> None:
        if name in SELF_NAMES:
            self._flag(node, f"`{name}` may not be assigned in model_new.py")
        self.generic_visit(node)

    # -- classes ----------------------------------------------------------------------------------------------
    def _check_class_body(self, node: ast.ClassDef) -> None:
        """The class body evaluates names in its own scope: its methods' raw functions are reachable there."""
        methods = {s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        property_parts = {id(d.value) for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
                          for d in s.decorator_list
                          if isinstance(d, ast.Attribute) and d.attr in PROPERTY_PARTS and isinstance(d.value, ast.Name)}
        for name in _class_scope_names(node):  # `@block.setter` names the property, and only to extend it
            if name.id in methods and isinstance(name.ctx, ast.Load) and id(name) not in property_parts:
                self._flag(name, f"the class body of `{node.name}` names its method `{name.id}` (the function "
                                 "itself, callable with any `self`): use the method through an instance")

    def _plain_values(self, class_name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        """What may be read off the class: names its body (or a model_new.py base's) assigns, and its staticmethods
        and classmethods (Python binds a classmethod to the class; a staticmethod has no `self`)."""
        node = self.classes[class_name]
        values: set[str] = set()
        for statement in node.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else (
                [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else [])
            for target in targets:
                values.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in statement.decorator_list):
                values.add(statement.name)  # no `self` (a staticmethod may not name one), or bound to the class
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in self.classes and base.id not in seen:
                values |= self._plain_values(base.id, seen | {class_name})
        return values


def _parameters(args: ast.arguments) -> list[ast.arg]:
    return [*args.posonlyargs, *args.args, *([args.vararg] if args.vararg else []), *args.kwonlyargs,
            *([args.kwarg] if args.kwarg else [])]


def _method_decorator(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in METHOD_DECORATORS
    if isinstance(node, ast.Attribute) and node.attr in PROPERTY_PARTS and isinstance(node.value, ast.Name):
        return True
    root = node
    while isinstance(root, (ast.Attribute, ast.Call)):
        root = root.func if isinstance(root, ast.Call) else root.value
    return isinstance(root, ast.Name) and root.id == "torch" and root is not node


def _names_in(node: ast.expr) -> Iterator[ast.Name]:
    """The bare names of `node` (a class, or a tuple of classes for isinstance)."""
    if isinstance(node, ast.Name):
        yield node
    elif isinstance(node, ast.Tuple):
        for element in node.elts:
            yield from _names_in(element)


def _class_scope_names(node: ast.ClassDef) -> Iterator[ast.Name]:
    """Names evaluated in the class body's own scope: its plain statements, and its functions' and nested
    classes' decorators, defaults, annotations and bases (their bodies are scopes of their own). Lambdas and
    comprehensions in plain statements are searched whole: conservative, a method's name is rarely reused."""
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parts: list[ast.AST] = [*statement.decorator_list, *statement.args.defaults,
                                    *[d for d in statement.args.kw_defaults if d is not None]]
        elif isinstance(statement, ast.ClassDef):
            parts = [*statement.decorator_list, *statement.bases, *statement.keywords]
        else:
            parts = [statement]
        for part in parts:
            yield from (n for n in ast.walk(part) if isinstance(n, ast.Name))
