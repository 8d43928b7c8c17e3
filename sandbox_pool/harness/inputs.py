"""Input draws for verification and timing.

Besides `get_inputs()` itself, verification draws from other distributions that keep the
domain the reference needs: a tensor whose draw is non-negative stays non-negative, one in
[0, 1] stays in [0, 1], integer and boolean tensors are redrawn by `get_inputs()` only.
This defeats closed-form shortcuts for the known input distribution (HACKS.md #16, #17).
"""

from __future__ import annotations

import math
import random
import threading
from typing import Any, Callable

import numpy as np
import torch

DISTRIBUTIONS = ("native", "scaled", "heavy_tailed", "shifted", "structured")

GLOBAL_RNG_LOCK = threading.RLock()
"""Held around every seeded use of the global generators (torch's, Python's, numpy's): workers
of one pool share a process, and a draw must be reproducible in the child whatever they do."""


def draw(get_inputs: Callable[[], list[Any]], seed: int, distribution: str = "native", device: str = "cpu") -> list[Any]:
    """One input list: `get_inputs()` under `seed` (factories default to `device`), then transformed.

    Drawing on the GPU is ~100x faster than on the CPU for large inputs; the same seed
    always gives the same values on the same device (Python's and numpy's generators are
    seeded too, for problems that use them).
    """
    with GLOBAL_RNG_LOCK:
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        with torch.device(device):
            values = list(get_inputs())
        if distribution == "native":
            return values
        gen = torch.Generator().manual_seed(seed ^ 0x5EED)  # scalars only: drawn on the CPU
        return [_transform(v, distribution, gen) if _is_float_tensor(v) else v for v in values]


def _is_float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 1


def _transform(t: torch.Tensor, distribution: str, gen: torch.Generator) -> torch.Tensor:
    lo, hi = float(t.min()), float(t.max())
    nonneg, unit = lo >= 0.0, lo >= 0.0 and hi <= 1.0
    base = t.to(torch.float32)
    if distribution == "scaled":
        factor = float(torch.empty(1).uniform_(2.0, 4.0, generator=gen))
        out = base * factor if not unit else base.pow(factor)
    elif distribution == "heavy_tailed":
        noise = torch.distributions.StudentT(torch.tensor(2.0, device=base.device)).sample(base.shape).clamp(-50, 50)
        out = noise.abs() if nonneg else noise
        out = out / (out.abs().max() + 1e-6) if unit else out
    elif distribution == "shifted":
        shift = float(torch.empty(1).uniform_(0.5, 1.5, generator=gen))
        out = base + shift if not unit else (base * 0.5 + 0.25)
    elif distribution == "structured":
        ramp = torch.linspace(-3.0, 3.0, base.numel(), device=base.device).reshape(base.shape)
        out = ramp.abs() if nonneg else ramp
        out = out / 3.0 if unit else out
    else:
        raise ValueError(f"unknown distribution {distribution!r}")
    return out.to(t.dtype).contiguous()


def correctness_plan(trials: int) -> list[str]:
    """Distribution of each correctness trial: native first, then the others in turn."""
    return [DISTRIBUTIONS[i % len(DISTRIBUTIONS)] for i in range(trials)]


def nbytes(values: list[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def digest(values: list[Any]) -> list[list[float]]:
    """Per input: (sum, sum of |x|) in float64, or the value of a scalar; compared with `same_digest`."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            x = v.detach().to(torch.float64)
            out.append([float(x.sum()), float(x.abs().sum())])
        elif isinstance(v, (bool, int, float)):
            out.append([float(v)])
        else:
            out.append([])
    return out


def same_digest(a: list[list[float]], b: list[list[float]]) -> bool:
    """Digests of the same draw (tolerant to reduction order; NaN equals NaN)."""
    if len(a) != len(b):
        return False
    for row_a, row_b in zip(a, b):
        if len(row_a) != len(row_b):
            return False
        for x, y in zip(row_a, row_b):
            if math.isnan(x) and math.isnan(y):
                continue
            if not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9):
                return False
    return True
