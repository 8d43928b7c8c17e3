"""Input draws for verification and timing.

Besides `get_inputs()` itself, verification draws from other distributions that keep the
domain the reference needs: a tensor whose draw is non-negative stays non-negative, one in
[-1, 1] (e.g. [0, 1)) stays inside the native draw's own range; integer-valued floating data of
more than two levels (8-bit pixels, counts), and integer tensors of more than two levels (uint8 images,
token ids, labels), get the same kinds of structure built from their own values only
(`_transform_levels`: the lowest level with the draw's values here and there, sorted rows, rows capped at
one of their levels, low levels raised to a high one), so an index stays a valid index; boolean tensors,
0/1 masks, one-hot labels, and integer draws whose values are all distinct or already sorted (a
permutation, an index set, offsets: structure the reference may rely on) are left as `get_inputs()` drew them.
Every transform of continuous data works on the native draw (multiplicative factors keep each
element's sign and its zeros):

- ``spikes``: a damped background (x 1e-3) with sparse spikes at random positions (density
  2^-3..2^-10, magnitudes 0.1..10 x the draw's largest value);
- ``ramp``: position-dependent ramps, a linear factor 0.05..1 (either direction) along every
  axis;
- ``row_col``: per-row and per-column scales, a factor 10^U(-1, 1) per index along every axis;
- ``heavy_tailed``: a Pareto(1.5) factor 0.1 * U^(-2/3) (capped at 10) per element;
- ``affine``: the whole draw scaled by 2..4 and shifted by 0.5..1.5 (in [-1, 1]: a signed power
  2..4, halved and shifted by 0.25), so its mean and spread are not the native ones;
- ``few_spikes``: 1..16 spikes in the whole tensor (log-uniform) on a background damped to carry about
  as much as they do: a kernel that reads a subset of the elements and checks its own spread (robustly,
  so outliers are ignored) sees a smooth background and misses most of them (red team, 2026-12-04: such a
  subsampler of a whole-tensor sum, which exchanges cannot move, was rewarded 3 against ``spikes`` alone).

A kernel that reduces over a subset of its input (strided, first k) or returns the
expectation of the native distribution fails these elementwise (defences distribution_shortcut, subsampling: docs/defences.md). A draw
can also carry an *influence perturbation* (`perturb_seed`, `perturb_fraction`): the values at
a random fraction of positions are exchanged among themselves (the multiset of values is
unchanged, so an i.i.d. draw stays an i.i.d. draw); the parent compares how the candidate's
output moves between the draw and its perturbed twin with how the reference's moves
(compare.influence_mismatch).
"""

from __future__ import annotations

import math
import random
import threading
from typing import Any, Callable

import numpy as np
import torch

DISTRIBUTIONS = ("native", "spikes", "ramp", "row_col", "heavy_tailed", "affine", "few_spikes")
"""Correctness trials cycle through these (native first); timed calls too, so most timed
inputs are ones on which an approximation fails its fingerprint check."""

IID_DISTRIBUTIONS = ("native", "affine")
"""Draws that look like the problem's own distribution: influence twins perturb these."""

GLOBAL_RNG_LOCK = threading.RLock()
"""Held around every seeded use of the global generators (torch's, Python's, numpy's): workers
of one pool share a process, and a draw must be reproducible in the child whatever they do."""


def draw(get_inputs: Callable[[], list[Any]], seed: int, distribution: str = "native", device: str = "cpu", *,
         perturb_seed: int | None = None, perturb_fraction: float = 0.0) -> list[Any]:
    """One input list: `get_inputs()` under `seed` (factories default to `device`), then transformed,
    then (for an influence twin) perturbed.

    Drawing on the GPU is ~100x faster than on the CPU for large inputs; the same seed
    always gives the same values on the same device (Python's and numpy's generators are
    seeded too, for problems that use them; the transforms use generators of their own).
    """
    with GLOBAL_RNG_LOCK:
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        with torch.device(device):
            values = list(get_inputs())
    if distribution != "native":
        gen = torch.Generator().manual_seed(seed ^ 0x5EED)  # scalars only: drawn on the CPU
        values = [_transform(v, distribution, gen, seed + 7919 * i) if _is_continuous(v) else
                  _transform_levels(v, distribution, gen, seed + 7919 * i) if _is_levels(v) else v
                  for i, v in enumerate(values)]
    if perturb_seed is not None and perturb_fraction > 0:
        values = [_exchange(v, perturb_fraction, perturb_seed + 7919 * i) if _is_continuous(v) or _is_levels(v)
                  else v for i, v in enumerate(values)]
    return values


def _is_continuous(value: Any) -> bool:
    """A floating tensor of several elements that is not integer-valued (labels, 0/1 masks)."""
    if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 1):
        return False
    head = value.reshape(-1)[:4096]  # almost always decides without a pass over the whole tensor
    if not bool(torch.equal(head, torch.round(head))):
        return True
    return not bool(torch.equal(value, torch.round(value)))


def _is_levels(value: Any) -> bool:
    """Integer-valued data of several levels, as floats (8-bit pixels, counts) or integers (uint8 images, token ids,
    labels): not a 0/1 mask or a one-hot label, and for integers not a draw whose values are all distinct or
    sorted along its last axis (a permutation, an index set, offsets), whose structure the reference may need
    (those stay as drawn). Red team, 2026-12-04: a constant mean of uint8-like pixels passed while only floats
    were restructured."""
    if not isinstance(value, torch.Tensor) or value.numel() <= 2 or value.dtype == torch.bool or value.is_complex():
        return False
    if value.is_floating_point():
        return not _is_continuous(value) and torch.unique(value.reshape(-1)[:4096]).numel() > 2
    head = value.reshape(-1)[:4096]
    levels = torch.unique(head).numel()
    if levels <= 2 or levels == head.numel():
        return False
    rows = value.reshape(-1, value.shape[-1])[: max(1, 4096 // max(1, value.shape[-1]))]
    steps = torch.diff(rows.long(), dim=-1)
    return not (steps.numel() and (bool((steps >= 0).all()) or bool((steps <= 0).all())))


def _transform_levels(t: torch.Tensor, distribution: str, gen: torch.Generator, seed: int) -> torch.Tensor:
    """The structured draws for integer-valued data, built from the draw's own values only (its levels, hence
    its range and integrality, are kept). Red team, 2026-12-04: with these draws left native, a row mean of
    8-bit pixels answered by the constant 127.5 was rewarded 3."""
    dev = _device_gen(t, seed)
    flat = t.reshape(-1)
    low = flat.min()
    if distribution in ("spikes", "few_spikes", "heavy_tailed"):  # the lowest level, the draw's own values here and there
        if distribution == "few_spikes":
            keep = torch.zeros(flat.numel(), dtype=torch.bool, device=t.device)
            keep[torch.randint(0, flat.numel(), (max(1, round(2.0 ** _uniform(gen, 0.0, 4.0))),),
                               generator=dev, device=t.device)] = True
            keep = keep.reshape(t.shape)
        else:
            density = 2.0 ** -_uniform(gen, 3.0, 10.0) if distribution == "spikes" else _uniform(gen, 0.05, 0.5)
            keep = torch.rand(t.shape, generator=dev, device=t.device) < density
        out = torch.where(keep, t, low)
    elif distribution == "ramp":  # sorted along the last axis: position decides the level
        out = torch.sort(t, dim=-1, descending=_uniform(gen, 0.0, 1.0) < 0.5).values
    elif distribution == "row_col":  # each row capped at one of its own levels
        rows = t.reshape(t.shape[0], -1) if t.dim() > 1 else t.reshape(1, -1)
        at = (torch.rand(rows.shape[0], 1, generator=dev, device=t.device) * 0.9 * rows.shape[1]).long()
        caps = torch.sort(rows, dim=1).values.gather(1, at)  # a level of its own, low to high per row
        out = torch.minimum(rows, caps).reshape(t.shape)
    elif distribution == "affine":  # everything below a high level raised to it: another mean, another spread
        k = max(1, int(flat.numel() * _uniform(gen, 0.5, 0.9)))
        out = torch.maximum(t, torch.kthvalue(flat.float(), k).values.to(t.dtype))
    else:
        raise ValueError(f"unknown distribution {distribution!r}")
    result = torch.empty_like(t)
    result.copy_(out)
    return result


def _device_gen(t: torch.Tensor, seed: int) -> torch.Generator:
    return torch.Generator(device=t.device).manual_seed(seed & ((1 << 63) - 1))


def _uniform(gen: torch.Generator, lo: float, hi: float) -> float:
    return float(torch.empty(1).uniform_(lo, hi, generator=gen))


def _axis_factor(shape: torch.Size, device: torch.device, make: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """The product over axes of per-index factors `make(axis, size)` (axes of size 1 skipped)."""
    factor = torch.ones((1,) * len(shape), dtype=torch.float32, device=device)
    for axis, size in enumerate(shape):
        if size > 1:
            view = [1] * len(shape)
            view[axis] = size
            factor = factor * make(axis, size).reshape(view)
    return factor


def _transform(t: torch.Tensor, distribution: str, gen: torch.Generator, seed: int) -> torch.Tensor:
    lo_t, hi_t = torch.aminmax(t)
    lo, hi = float(lo_t), float(hi_t)
    nonneg = lo >= 0.0
    base = t.to(torch.float32)
    dev = _device_gen(base, seed)
    shape, device = base.shape, base.device
    if distribution in ("spikes", "few_spikes"):
        if distribution == "spikes":
            density, damp = 2.0 ** -_uniform(gen, 3.0, 10.0), 1e-3
            mask = torch.rand(shape, generator=dev, device=device) < density
        else:
            count = max(1, round(2.0 ** _uniform(gen, 0.0, 4.0)))
            damp = min(1e-3, count / base.numel())
            mask = torch.zeros(base.numel(), dtype=torch.bool, device=device)
            mask[torch.randint(0, base.numel(), (count,), generator=dev, device=device)] = True
            mask = mask.reshape(shape)
        mask.view(-1)[int(torch.randint(0, base.numel(), (1,), generator=gen))] = True  # at least one
        top = max(abs(lo), abs(hi)) or 1.0
        picked = base[mask]
        spike = top * torch.pow(10.0, torch.rand(picked.shape, generator=dev, device=device) * 2 - 1)
        if not nonneg:  # the element's own sign
            spike = torch.where(picked < 0, -spike, spike)
        out = base * damp
        out[mask] = spike
    elif distribution == "ramp":
        def ramp(axis: int, size: int) -> torch.Tensor:
            ends = (0.05, 1.0) if _uniform(gen, 0.0, 1.0) < 0.5 else (1.0, 0.05)
            return torch.linspace(*ends, size, device=device)
        out = base * _axis_factor(shape, device, ramp)
    elif distribution == "row_col":
        out = base * _axis_factor(shape, device, lambda axis, size: torch.pow(
            10.0, torch.rand(size, generator=dev, device=device) * 2 - 1))
    elif distribution == "heavy_tailed":
        # a Pareto(1.5) factor, 0.1 .. 10 (capped): most elements shrink, a few grow by orders of magnitude
        factor = torch.rand(shape, generator=dev, device=device).clamp(min=1e-6).pow_(-1.0 / 1.5).mul_(0.1)
        out = base * factor.clamp_(max=10.0)
    elif distribution == "affine":
        factor, shift = _uniform(gen, 2.0, 4.0), _uniform(gen, 0.5, 1.5)
        if -1.0 <= lo and hi <= 1.0:  # a signed power keeps [0, 1] and [-1, 1]; then halved and shifted
            out = base.abs().pow(factor) * torch.sign(base) * 0.5 + 0.25
        else:
            out = base * factor + shift
    else:
        raise ValueError(f"unknown distribution {distribution!r}")
    if -1.0 <= lo and hi <= 1.0:  # a bounded native range: stay inside it
        out = out * _fit(out, lo, hi)
    result = torch.empty_like(t)  # the native draw's layout (strides) and dtype
    result.copy_(out)
    return result


def _fit(out: torch.Tensor, lo: float, hi: float) -> float:
    """The factor (<= 1) that brings `out` inside [lo, hi]; multiplicative, so signs are kept."""
    factor = 1.0
    low, high = torch.aminmax(out)
    bottom, top = torch.stack([low, high]).tolist()  # one host sync
    if top > hi and top > 0:
        factor = min(factor, max(hi, 0.0) / top)
    if bottom < lo and bottom < 0:
        factor = min(factor, min(lo, 0.0) / bottom)
    return factor


def _exchange(t: torch.Tensor, fraction: float, seed: int) -> torch.Tensor:
    """`t` with the values at a random `fraction` of positions exchanged among those positions
    (each takes the value of one far away in the flattened order); the multiset of values, hence
    the support and the empirical distribution, is unchanged."""
    dev = _device_gen(t, seed)
    flat = t.contiguous().reshape(-1).clone()
    chosen = torch.nonzero(torch.rand(flat.numel(), generator=dev, device=t.device) < fraction).reshape(-1)
    if chosen.numel() >= 2:
        shift = max(1, int(chosen.numel() * (0.25 + 0.5 * float(torch.rand(1, generator=dev, device=t.device)))))
        flat[chosen] = flat[torch.roll(chosen, shift)]
    result = torch.empty_like(t)
    result.copy_(flat.reshape(t.shape))
    return result


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
            out.append(torch.stack([x.sum(), x.abs().sum()]).tolist())  # one host sync
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
        # A signed sum can cancel to near zero while its rounding (which depends on the reduction
        # order, i.e. on thread counts) scales with the sum of |x|: tolerate relative to the row's largest.
        scale = max((abs(v) for v in (*row_a, *row_b) if math.isfinite(v)), default=0.0)
        for x, y in zip(row_a, row_b):
            if math.isnan(x) and math.isnan(y):
                continue
            if not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9 * max(1.0, scale)):
                return False
    return True
