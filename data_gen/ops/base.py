"""The operator catalog's vocabulary: sizes, input domains, operator templates.

An `OpTemplate` knows how to instantiate one operator for a given input shape: it returns
an `OpCall` (constructor expressions, the forward expression, the constructor arguments,
any extra inputs) or None when the shape does not fit. The same templates make the crawled
seed tasks (one operator) and the programmatic composer's fused tasks (a chain).

Template strings use `str.format` placeholders, resolved by `render.py`:
``{m}`` the operator's module (``{m_<key>}`` for a named one), ``{x}`` the current tensor,
``{x1}``, ``{x2}`` its extra inputs, ``{<param>}`` a constructor argument (in constructor
expressions) or the attribute that stores it (in forward expressions).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Shape = tuple[int, ...]


class Domain(str, enum.Enum):
    """Value range a tensor is known to lie in (what an operator needs or produces)."""

    REAL = "real"
    NONNEG = "nonneg"
    POSITIVE = "positive"
    UNIT = "unit"
    """Open interval (-1, 1)."""
    PROB = "prob"
    """Open interval (0, 1)."""
    INDEX = "index"
    """Integer indices (int64)."""

    def satisfies(self, need: Domain) -> bool:
        """True when a tensor in this domain is a valid input for an operator needing `need`."""
        if need is self:
            return True
        if self is Domain.INDEX or need is Domain.INDEX:
            return False
        implied = {
            Domain.PROB: {Domain.POSITIVE, Domain.NONNEG, Domain.UNIT, Domain.REAL},
            Domain.POSITIVE: {Domain.NONNEG, Domain.REAL},
            Domain.NONNEG: {Domain.REAL},
            Domain.UNIT: {Domain.REAL},
        }
        return need in implied.get(self, {Domain.REAL})


class Category(str, enum.Enum):
    """Role of an operator in a fused chain."""

    ANCHOR = "anchor"
    """Compute-heavy (matmul, convolution): a chain usually starts with one."""
    ELEMENTWISE = "elementwise"
    ACTIVATION = "activation"
    NORM = "norm"
    POOL = "pool"
    REDUCTION = "reduction"
    """Shrinks the tensor; only last in a chain."""
    LAYOUT = "layout"
    """Moves data without arithmetic (permute, pad, flip); at most one per chain."""
    ATTENTION = "attention"
    LOSS = "loss"
    """Returns a scalar; only last in a chain."""
    OTHER = "other"


class Dims(BaseModel):
    """Typical sizes used to pick input shapes and constructor arguments."""

    model_config = ConfigDict(extra="forbid")

    batch: int = Field(description="Batch size.")
    channels: int = Field(description="Channels of images and sequences.")
    spatial: int = Field(description="Height and width of images.")
    depth: int = Field(description="Depth of volumes (3D inputs).")
    length: int = Field(description="Length of 1D signals.")
    features: int = Field(description="Feature size of vectors and matrices.")
    rows: int = Field(description="Rows of matrix products (tokens in a batch).")
    seq: int = Field(description="Sequence length (attention, recurrent layers).")
    hidden: int = Field(description="Hidden size of attention / recurrent / transformers layers.")
    heads: int = Field(description="Attention heads.")
    vocab: int = Field(description="Vocabulary / number of embeddings.")
    classes: int = Field(description="Number of classes (classification losses).")
    max_numel: int = Field(description="Largest tensor a composed chain may create.")


SIZE_PRESETS: dict[str, Dims] = {
    "tiny": Dims(batch=2, channels=4, spatial=8, depth=4, length=32, features=64, rows=16, seq=8, hidden=32,
                 heads=2, vocab=100, classes=10, max_numel=1 << 16),
    "small": Dims(batch=4, channels=8, spatial=16, depth=8, length=128, features=256, rows=64, seq=32, hidden=64,
                  heads=4, vocab=1000, classes=32, max_numel=1 << 20),
    "medium": Dims(batch=16, channels=32, spatial=64, depth=16, length=1024, features=2048, rows=512, seq=256,
                   hidden=512, heads=8, vocab=8000, classes=256, max_numel=1 << 26),
    "large": Dims(batch=64, channels=64, spatial=128, depth=32, length=32768, features=8192, rows=4096, seq=1024,
                  hidden=2048, heads=16, vocab=32000, classes=1000, max_numel=1 << 28),
}
"""Size presets: `tiny` for CPU tests, `small` for CPU runs, `large` for eager times of 1-100 ms on an H100-class GPU."""


def size_preset(name: str) -> Dims:
    """The named preset; raises ConfigError listing the valid names."""
    from cuda_agent.errors import ConfigError

    try:
        return SIZE_PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown size preset {name!r}; choose one of {sorted(SIZE_PRESETS)}") from None


@dataclass(frozen=True)
class InputSpec:
    """One tensor returned by `get_inputs()`."""

    shape: Shape
    domain: Domain = Domain.REAL
    high: int = 2
    """Exclusive upper bound of integer inputs (Domain.INDEX)."""
    signs: bool = False
    """Integer input of -1 / +1 labels (float)."""

    def render(self) -> str:
        """The Python expression that draws this input."""
        dims = ", ".join(str(d) for d in self.shape) if self.shape else ""
        size = f"({dims},)" if len(self.shape) == 1 else f"({dims})" if self.shape else "()"
        if self.signs:
            return f"torch.randint(0, 2, {size}).float() * 2 - 1"
        expressions = {
            Domain.REAL: f"torch.randn({dims})",
            Domain.NONNEG: f"torch.rand({dims})",
            Domain.POSITIVE: f"torch.rand({dims}) + 0.5",
            Domain.UNIT: f"torch.rand({dims}) * 1.8 - 0.9",
            Domain.PROB: f"torch.rand({dims}) * 0.98 + 0.01",
            Domain.INDEX: f"torch.randint(0, {self.high}, {size})",
        }
        return expressions[self.domain]

    def meta(self) -> Any:
        """An uninitialised tensor of this shape and dtype on the meta device (shape inference)."""
        import torch

        dtype = torch.int64 if self.domain is Domain.INDEX else torch.float32
        return torch.empty(self.shape, dtype=dtype, device="meta")


@dataclass(frozen=True)
class OpCall:
    """One operator instantiated for a concrete input shape."""

    call: str
    """Forward expression, e.g. ``{m}({x})`` or ``torch.cumsum({x}, dim={dim})``."""
    modules: Mapping[str, str] = field(default_factory=dict)
    """Constructor expressions by key ("" = the default module ``{m}``)."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Constructor arguments (ints, floats, bools, tuples, short strings)."""
    extra_inputs: tuple[InputSpec, ...] = ()
    """Inputs besides the current tensor, referenced as ``{x1}``, ``{x2}``, ..."""
    pre: tuple[str, ...] = ()
    """Forward statements run before `call` (transformers seeds only)."""
    imports: tuple[str, ...] = ()
    """Import lines the expressions need besides torch, nn and F."""


Builder = Callable[[Shape, Dims, random.Random], "OpCall | None"]
SeedShape = Callable[[Dims], Shape]


@dataclass(frozen=True)
class OpTemplate:
    """One crawled operator: how to build it for a shape, and how it may be chained."""

    op: str
    """Fully qualified origin operator, e.g. ``torch.nn.Conv2d``."""
    family: str
    """``nn``, ``functional``, ``tensor`` or ``transformers``."""
    category: Category
    build: Builder
    seed_shape: SeedShape
    """Primary input shape of the seed task."""
    ranks: frozenset[int] | None = None
    """Input ranks accepted when chained; None = any rank >= 1."""
    domain_in: Domain = Domain.REAL
    domain_out: Domain | None = Domain.REAL
    """Domain of the output; None = the input's domain."""
    variant: str = ""
    composable: bool = True
    """Usable by the programmatic composer (deterministic, float in / float out)."""

    @property
    def key(self) -> str:
        """Unique name in the catalog: the operator plus its variant."""
        return f"{self.op}:{self.variant}" if self.variant else self.op

    @property
    def short_name(self) -> str:
        """Readable name used in task names, e.g. ``Conv2d`` or ``interpolate_bilinear``."""
        base = self.op.rsplit(".", 1)[-1]
        return f"{base}_{self.variant}" if self.variant else base

    def accepts(self, shape: Shape, domain: Domain) -> bool:
        """Whether the template may follow a tensor of this shape and domain in a chain."""
        if self.ranks is not None and len(shape) not in self.ranks:
            return False
        return len(shape) >= 1 and domain.satisfies(self.domain_in)

    def output_domain(self, domain: Domain) -> Domain:
        return domain if self.domain_out is None else self.domain_out


def pick(rng: random.Random, options: list[int], lo: int = 1, hi: int | None = None) -> int | None:
    """A random option within [lo, hi], or None when none fits."""
    valid = [o for o in options if o >= lo and (hi is None or o <= hi)]
    return rng.choice(valid) if valid else None


def divisor(n: int, options: tuple[int, ...] = (8, 4, 2)) -> int | None:
    """The first option dividing n."""
    return next((o for o in options if n % o == 0), None)
