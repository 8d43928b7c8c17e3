"""Test-only stand-in for Ray on the GPU node (its wheel is too large to carry; docs/training.md).

veRL 0.9.1 imports ``ray`` and its submodules at module level (``verl.protocol``, the single
controller) even on paths that never start a Ray cluster, such as ``verl.trainer.sft_trainer``
under torchrun. This shim makes every ``ray`` / ``ray.*`` import succeed: names are stub classes
(usable in annotations, ``isinstance`` and as base classes, and ``@ray.remote``-style decorators
return what they decorate); calling one otherwise raises. Only the ``train`` phase of
scripts/gpu-session.sh puts it on PYTHONPATH. Never install it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+shim"


class _StubMeta(type):
    def __getattr__(cls, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return _stub(f"{cls.__qualname__}.{item}")


class _Stub(metaclass=_StubMeta):
    def __new__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:  # a decorator: leave the target as is
            return args[0]
        if not args and kwargs:  # a decorator factory: @ray.remote(num_gpus=1)
            return lambda target: target
        raise RuntimeError(f"ray is a test-only shim here ({cls.__qualname__} called); install ray to use it")


def _stub(name: str) -> type:
    return _StubMeta(name.rsplit(".", 1)[-1], (_Stub,), {"__qualname__": name})


def _module_getattr(prefix: str):
    def __getattr__(item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return _stub(f"{prefix}.{item}")

    return __getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith("ray."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []
        module.__getattr__ = _module_getattr(module.__name__)


sys.meta_path.insert(0, _Finder())


def is_initialized() -> bool:
    return False


def remote(*args, **kwargs):
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda target: target


__getattr__ = _module_getattr("ray")
