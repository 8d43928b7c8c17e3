"""Load a reference problem (KernelBench format) from its source, in the trusted process."""

from __future__ import annotations

import hashlib
import types
from dataclasses import dataclass
from typing import Any, Callable

from cuda_agent.errors import ProblemError


@dataclass(frozen=True)
class Problem:
    """A loaded reference: the Model class and its input factories."""

    source: str
    sha256: str
    model_cls: type
    get_inputs: Callable[[], list[Any]]
    get_init_inputs: Callable[[], list[Any]]


def load_problem(source: str, name: str = "cuda_agent_reference") -> Problem:
    """Execute `source` in a fresh module namespace and pick Model / get_inputs / get_init_inputs."""
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    try:
        exec(compile(source, "model.py", "exec"), module.__dict__)  # trusted task code
    except Exception as exc:
        raise ProblemError(f"model.py failed to execute: {type(exc).__name__}: {exc}") from exc
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemError(f"model.py must define {', '.join(missing)} (KernelBench format)")
    return Problem(
        source=source,
        sha256=hashlib.sha256(source.encode()).hexdigest(),
        model_cls=module.Model,
        get_inputs=module.get_inputs,
        get_init_inputs=module.get_init_inputs,
    )
