"""Short constructors for catalog entries, plus the standard seed shapes.

`module_op` declares an `nn.Module` operator (``self.m = nn.X(...)``, forward ``{m}({x})``);
`function_op` declares a function or tensor method called in `forward`. Parameters may be a
fixed mapping or a function of (input shape, dims, rng) returning None when the shape does
not fit.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from cuda_agent.data_gen.ops.base import (
    Category,
    Dims,
    Domain,
    InputSpec,
    OpCall,
    OpTemplate,
    SeedShape,
    Shape,
)

ParamFn = Callable[[Shape, Dims, random.Random], "Mapping[str, Any] | None"]
ExtraFn = Callable[[Shape, Dims, random.Random], "tuple[InputSpec, ...]"]
Guard = Callable[[Shape], bool]


# Standard seed shapes -------------------------------------------------------------------

def flat(d: Dims) -> Shape:
    """A large 2D tensor (elementwise operators: memory-bound, so 4x the rows of a matrix product)."""
    return (4 * d.rows, d.features)


def vec(d: Dims) -> Shape:
    return (d.batch, d.features)


def mat(d: Dims) -> Shape:
    return (d.rows, d.features)


def sig(d: Dims) -> Shape:
    """1D signals: (batch, channels, length)."""
    return (d.batch, d.channels, d.length)


def img(d: Dims) -> Shape:
    return (d.batch, d.channels, d.spatial, d.spatial)


def vol(d: Dims) -> Shape:
    """3D volumes: (batch, channels, depth, height, width)."""
    return (max(1, d.batch // 4), max(2, d.channels // 2), d.depth, max(4, d.spatial // 2), max(4, d.spatial // 2))


def tokens(d: Dims) -> Shape:
    return (d.batch, d.seq, d.hidden)


def like(domain: Domain = Domain.REAL, count: int = 1) -> ExtraFn:
    """Extra-input function: `count` more tensors of the current shape."""
    return lambda s, d, r: tuple(InputSpec(s, domain) for _ in range(count))


def _params(params: ParamFn | Mapping[str, Any] | None, s: Shape, d: Dims, r: random.Random) -> Mapping[str, Any] | None:
    if params is None:
        return {}
    if callable(params):
        return params(s, d, r)
    return dict(params)


def module_op(
    cls: str,
    *,
    category: Category,
    seed: SeedShape,
    params: ParamFn | Mapping[str, Any] | None = None,
    positional: int = 0,
    call: str = "{m}({x})",
    extra: ExtraFn | None = None,
    ranks: set[int] | None = None,
    guard: Guard | None = None,
    domain_in: Domain = Domain.REAL,
    domain_out: Domain | None = Domain.REAL,
    variant: str = "",
    composable: bool = True,
    namespace: str = "nn",
) -> OpTemplate:
    """An `nn.<cls>` module built in `__init__` and applied in `forward`."""

    def build(s: Shape, d: Dims, r: random.Random) -> OpCall | None:
        if guard is not None and not guard(s):
            return None
        p = _params(params, s, d, r)
        if p is None:
            return None
        keys = list(p)
        args = [f"{{{k}}}" for k in keys[:positional]] + [f"{k}={{{k}}}" for k in keys[positional:]]
        extras = extra(s, d, r) if extra is not None else ()
        return OpCall(call=call, modules={"": f"{namespace}.{cls}({', '.join(args)})"}, params=p, extra_inputs=extras)

    return OpTemplate(
        op=f"torch.nn.{cls}",
        family="nn",
        category=category,
        build=build,
        seed_shape=seed,
        ranks=frozenset(ranks) if ranks is not None else None,
        domain_in=domain_in,
        domain_out=domain_out,
        variant=variant,
        composable=composable,
    )


def function_op(
    op: str,
    call: str,
    *,
    category: Category,
    seed: SeedShape,
    family: str,
    params: ParamFn | Mapping[str, Any] | None = None,
    extra: ExtraFn | None = None,
    ranks: set[int] | None = None,
    guard: Guard | None = None,
    domain_in: Domain = Domain.REAL,
    domain_out: Domain | None = Domain.REAL,
    variant: str = "",
    composable: bool = True,
) -> OpTemplate:
    """A function (``torch.x``, ``F.x``) or tensor method called in `forward`; `op` is its qualified name."""

    def build(s: Shape, d: Dims, r: random.Random) -> OpCall | None:
        if guard is not None and not guard(s):
            return None
        p = _params(params, s, d, r)
        if p is None:
            return None
        extras = extra(s, d, r) if extra is not None else ()
        return OpCall(call=call, params=p, extra_inputs=extras)

    return OpTemplate(
        op=op,
        family=family,
        category=category,
        build=build,
        seed_shape=seed,
        ranks=frozenset(ranks) if ranks is not None else None,
        domain_in=domain_in,
        domain_out=domain_out,
        variant=variant,
        composable=composable,
    )
