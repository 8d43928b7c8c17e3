"""What model_new.py can reach by the attribute chains the static check allows, walked on the installed torch.

A module outside torch, math and typing (a `sys`, `logging`, `copyreg` that a torch module imported), or a
torch module the policy keeps out of reach (`torch.distributed` under the name `dist`, anything private),
is a way around the static policy: every such chain must pass through a name it refuses. A new torch that
re-exports another module under a new name fails here first.
"""

from __future__ import annotations

import importlib
import types
import warnings
from collections.abc import Iterator

import torch  # noqa: F401 - the roots below
import math  # noqa: F401
import typing  # noqa: F401

from cuda_agent.sandbox_pool.harness.policy import (
    ALLOWED_DUNDERS,
    FORBIDDEN_ATTRIBUTES,
    FORBIDDEN_TORCH_ATTRS,
    INTERPRETER_ATTRIBUTES,
)

ROOTS = ("torch", "math", "typing")
LOADED = ("torch._dynamo", "torch.distributed", "torch.distributed.rpc", "torch.testing", "torch.onnx", "torch.fx",
          "torch.export", "torch.utils.data", "torch.profiler", "torch.jit", "torch.ao.quantization.quantize_fx")
"""Submodules that some process of ours loads (the compile baselines, the data filter, training, tests): once
loaded they are attributes of their packages, so the walk starts with them loaded (it found more in the whole
suite's process than alone before this list)."""


def _allowed(name: str) -> bool:
    """The static check's rule for an attribute of anything but `self` (static_check._ModelNewVisitor)."""
    if name in FORBIDDEN_ATTRIBUTES or name in FORBIDDEN_TORCH_ATTRS or name in INTERPRETER_ATTRIBUTES:
        return False
    return not name.startswith("_") or name in ALLOWED_DUNDERS


def _out_of_reach(module: types.ModuleType) -> bool:
    parts = module.__name__.split(".")
    if parts[0] not in ROOTS:
        return True
    return any((p.startswith("_") and p not in ALLOWED_DUNDERS) or p in FORBIDDEN_TORCH_ATTRS for p in parts[1:])


def _in_reach() -> Iterator[tuple[str, object]]:
    """(chain, value) for every attribute the rules allow of every module in reach, from the roots; a module's
    lazy attributes are imported too (getattr). Modules out of reach are yielded, not entered."""
    for name in LOADED:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(name)
        except Exception:  # not in this build of torch
            pass
    queue = [(name, importlib.import_module(name)) for name in ROOTS]
    seen: set[int] = set()
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
                    value = getattr(module, name)
            except Exception:
                continue
            yield f"{path}.{name}", value
            if isinstance(value, types.ModuleType) and not _out_of_reach(value):
                queue.append((f"{path}.{name}", value))


def reachable_escapes() -> list[str]:
    """Every allowed chain from the roots that ends on a module out of reach."""
    return sorted(f"{chain} -> {value.__name__}" for chain, value in _in_reach()
                  if isinstance(value, types.ModuleType) and _out_of_reach(value))


HARMLESS_FOREIGN = {
    # classes and helpers of other modules that torch's modules hold, reachable by allowed chains; none reads
    # or writes memory, imports, evaluates a string the candidate chose, or runs code later on its own
    "ABC", "ABCMeta", "AbstractContextManager", "Callable", "Counter", "Enum", "GenericAlias", "Iterable",
    "Mapping", "Number", "OrderedDict", "ParamSpec", "Real", "Sequence", "TypeAliasType", "TypeIs", "TypeVar",
    "abstractmethod", "auto", "bisect_right", "contextmanager", "deepcopy", "defaultdict", "deprecated",
    "namedtuple",  # evaluates a template with its field names, which must be identifiers
    "override", "partial", "total_ordering", "warn", "wraps", "TypedDict",
    "add_op",  # operator.add under another name
}


def reachable_foreign_callables() -> dict[str, str]:
    """name -> where, for every function or class of a module outside the roots reachable by allowed chains."""
    found: dict[str, str] = {}
    for chain, value in _in_reach():
        if isinstance(value, types.ModuleType) or not callable(value):
            continue
        home = getattr(value, "__module__", None) or ""
        if home.split(".")[0] not in ROOTS and home != "builtins":
            found.setdefault(chain.rsplit(".", 1)[1], f"{chain} ({home}.{getattr(value, '__qualname__', '?')})")
    return found


def test_every_foreign_callable_in_reach_is_harmless() -> None:
    unknown = {name: where for name, where in reachable_foreign_callables().items() if name not in HARMLESS_FOREIGN}
    assert unknown == {}, ("model_new.py could call these functions of other modules; refuse their names in "
                           "policy.FORBIDDEN_TORCH_ATTRS or, if harmless, list them in HARMLESS_FOREIGN:\n"
                           + "\n".join(sorted(unknown.values())))


def test_no_allowed_chain_leaves_torch_math_and_typing() -> None:
    escapes = reachable_escapes()
    assert escapes == [], "model_new.py could reach these; add their last names to policy.FORBIDDEN_ATTRIBUTES:\n" + \
        "\n".join(escapes)
