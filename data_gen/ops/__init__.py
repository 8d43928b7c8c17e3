"""The operator catalog: every crawled torch and transformers operator as an `OpTemplate`.

    from cuda_agent.data_gen.ops import catalog
    templates = catalog(libraries=("torch",))

Torch entries are composable (the programmatic composer chains them); transformers entries
are seeds only. Importing this package imports neither torch nor transformers.
"""

from __future__ import annotations

from collections.abc import Iterable

from cuda_agent.data_gen.ops.base import (
    SIZE_PRESETS,
    Category,
    Dims,
    Domain,
    InputSpec,
    OpCall,
    OpTemplate,
    size_preset,
)
from cuda_agent.errors import ConfigError

LIBRARIES = ("torch", "transformers")
DEFAULT_SIZE = "small"
"""Size preset of `crawl` and `compose` when none is given (the CPU one; `pipeline` picks large on cuda)."""


def catalog(libraries: Iterable[str] = LIBRARIES) -> list[OpTemplate]:
    """Templates of the chosen libraries, in a stable order; raises ConfigError on a duplicate key."""
    from cuda_agent.data_gen.ops import torch_functional, torch_nn, torch_tensor, transformers_ops

    chosen = list(libraries)
    unknown = set(chosen) - set(LIBRARIES)
    if unknown:
        raise ConfigError(f"unknown libraries {sorted(unknown)}; choose from {list(LIBRARIES)}")
    templates: list[OpTemplate] = []
    if "torch" in chosen:
        templates += torch_nn.templates() + torch_functional.templates() + torch_tensor.templates()
    if "transformers" in chosen:
        templates += transformers_ops.templates()
    seen: set[str] = set()
    for template in templates:
        if template.key in seen:
            raise ConfigError(f"duplicate operator template {template.key!r}: give one of them a variant")
        seen.add(template.key)
    return templates


def by_key(libraries: Iterable[str] = LIBRARIES) -> dict[str, OpTemplate]:
    """Templates indexed by `OpTemplate.key`."""
    return {t.key: t for t in catalog(libraries)}


__all__ = [
    "DEFAULT_SIZE",
    "LIBRARIES",
    "SIZE_PRESETS",
    "Category",
    "Dims",
    "Domain",
    "InputSpec",
    "OpCall",
    "OpTemplate",
    "by_key",
    "catalog",
    "size_preset",
]
