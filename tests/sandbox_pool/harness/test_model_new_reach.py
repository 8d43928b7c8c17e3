"""What model_new.py can reach by the attribute chains the static check allows, walked on the installed torch.

A module outside torch, math and typing (a `sys`, `logging`, `copyreg` that a torch module imported), or a
torch module the policy keeps out of reach (`torch.distributed` under the name `dist`, anything private),
is a way around the static policy: every such chain must pass through a name it refuses. A new torch that
re-exports another module under a new name fails here first.
"""

from __future__ import annotations

import types
import warnings

import torch  # noqa: F401 - the roots below
import math  # noqa: F401
import typing  # noqa: F401

from cuda_agent.sandbox_pool.harness.policy import (
    ALLOWED_DUNDERS,
    FORBIDDEN_ATTRIBUTES,
    FORBIDDEN_TORCH_ATTRS,
    INTERPRETER_PREFIXES,
)

ROOTS = ("torch", "math", "typing")


def _allowed(name: str) -> bool:
    """The static check's rule for an attribute of anything but `self` (static_check._ModelNewVisitor)."""
    if name in FORBIDDEN_ATTRIBUTES or name in FORBIDDEN_TORCH_ATTRS or name.startswith(INTERPRETER_PREFIXES):
        return False
    return not name.startswith("_") or name in ALLOWED_DUNDERS


def _out_of_reach(module: types.ModuleType) -> bool:
    parts = module.__name__.split(".")
    if parts[0] not in ROOTS:
        return True
    return any((p.startswith("_") and p not in ALLOWED_DUNDERS) or p in FORBIDDEN_TORCH_ATTRS for p in parts[1:])


def reachable_escapes() -> list[str]:
    """Every allowed chain from the roots that ends on a module out of reach."""
    import importlib

    queue = [(name, importlib.import_module(name)) for name in ROOTS]
    seen: set[int] = set()
    escapes = []
    while queue:
        path, module = queue.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        for name in dir(module):
            if not _allowed(name):
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    value = getattr(module, name)  # a module's lazy attributes are imported too
            except Exception:
                continue
            if not isinstance(value, types.ModuleType):
                continue
            if _out_of_reach(value):
                escapes.append(f"{path}.{name} -> {value.__name__}")
            else:
                queue.append((f"{path}.{name}", value))
    return sorted(escapes)


def test_no_allowed_chain_leaves_torch_math_and_typing() -> None:
    escapes = reachable_escapes()
    assert escapes == [], "model_new.py could reach these; add their last names to policy.FORBIDDEN_ATTRIBUTES:\n" + \
        "\n".join(escapes)
