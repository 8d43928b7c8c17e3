"""Output comparison: torch.testing.assert_close semantics, exact type / dtype / shape.

|out - ref| <= atol + rtol * |ref| elementwise; NaN only where the reference is NaN.
Also the fingerprints of timed outputs: random projections whose tolerance follows from the
elementwise bound, so a timed output can be checked without shipping it.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any

import torch


def flatten_outputs(value: Any) -> list[Any]:
    """Outputs as a flat list (tensors or python scalars); tuples/lists flattened in order."""
    if isinstance(value, (tuple, list)):
        return [x for item in value for x in flatten_outputs(item)]
    return [value]


def signature(outputs: list[Any]) -> list[str]:
    """Per output, what it is beyond its values: a tensor's dtype and shape ("float32[16, 1024]"), or a scalar's
    type. Timed outputs are judged by their values at sampled positions, so without this a kernel could return a
    narrower dtype or another shape once verification is over (red team, 2026-12-05: bf16 after the trials)."""
    return [f"{str(v.dtype).removeprefix('torch.')}{list(v.shape)}" if type(v) is torch.Tensor  # noqa: E721
            else type(v).__name__ for v in outputs]  # a subclass's attributes would run its code: its name only


def real_values(value: Any) -> Any:
    """A complex tensor as the real view of its (real, imaginary) pairs, float8 widened; anything else as it is. Every rule
    below judges real values: `.to(float64)` of a complex tensor keeps its real part alone, so before 2026-12-05
    a kernel that never wrote the imaginary halves passed every check (red team: `torch.polar`, reward 1 for
    half the work, -1 deserved)."""
    if isinstance(value, torch.Tensor) and value.is_complex():
        return torch.view_as_real(value.resolve_conj())
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.element_size() == 1:
        return value.to(torch.float32)  # float8: torch promotes it to nothing (its reductions raise), judge it widened
    return value


MAGNITUDE_FRACTION = 0.05
"""atol never exceeds this fraction of the reference's RMS: an output whose true values are
all below the tolerance cannot be matched by a constant (defence constant_output, docs/defences.md)."""


def output_rms(ref: Any) -> float | None:
    """The root mean square of a floating output's finite values (complex: of its real and imaginary parts), or None
    for anything else (an integer or boolean tensor, a scalar, an empty or all non-finite tensor)."""
    ref = real_values(ref)
    if not isinstance(ref, torch.Tensor) or not ref.is_floating_point() or ref.numel() == 0:
        return None
    # The usual case, all finite: one float64-accumulated reduction and one host sync, no copy.
    norm = float(torch.linalg.vector_norm(ref.detach(), dtype=torch.float64))
    if math.isfinite(norm):
        return norm / math.sqrt(ref.numel())
    finite = ref.detach().to(torch.float64)
    finite = finite[torch.isfinite(finite)]
    return float(finite.pow(2).mean().sqrt()) if finite.numel() else None


def effective_atol(ref: Any, atol: float) -> float:
    """atol, shrunk for outputs whose magnitude is comparable to it."""
    rms = output_rms(ref)
    return _atol_at(rms, atol) if rms else atol


def _atol_at(rms: float, atol: float) -> float:
    """atol, capped at MAGNITUDE_FRACTION of an output's RMS (never below 1e-12)."""
    return min(atol, max(MAGNITUDE_FRACTION * rms, 1e-12))


@dataclass(frozen=True)
class NativeScale:
    """One output on the native draw (`get_inputs()`'s own distribution): its tolerance and its mean magnitude."""

    atol: float
    magnitude: float


def mean_magnitude(ref: Any) -> float | None:
    """The mean absolute value of a floating output's finite values, or None (as `output_rms`)."""
    ref = real_values(ref)
    if not isinstance(ref, torch.Tensor) or not ref.is_floating_point() or ref.numel() == 0:
        return None
    total = float(torch.linalg.vector_norm(ref.detach(), ord=1, dtype=torch.float64))  # no copy, one host sync
    if math.isfinite(total):
        return total / ref.numel()
    finite = ref.detach().to(torch.float64).abs()
    finite = finite[torch.isfinite(finite)]
    return float(finite.mean()) if finite.numel() else None


def native_scales(native: list[Any], atol: float) -> list[NativeScale | None]:
    """Per output of the native draw's reference: what `draw_atol` keeps on the other draws (None: not floating,
    or all zero)."""
    scales: list[NativeScale | None] = []
    for ref in native:
        magnitude = mean_magnitude(ref)
        scales.append(NativeScale(effective_atol(ref, atol), magnitude) if magnitude else None)
    return scales


def draw_atol(ref: Any, atol: float, native: NativeScale | None = None) -> float:
    """The absolute tolerance of one output on one input draw.

    Without `native`, `effective_atol`. With it, the native draw's ratio of tolerance to mean magnitude is kept on
    every other draw, in both directions: `native.atol * mean|ref| / native.magnitude`. A draw that makes the outputs
    10x larger (row_col) makes an honest lower-precision kernel's rounding errors 10x larger too; an absolute
    tolerance that never grew with them rejected a TF32 GEMM whose native error was 8e-4 (issue 36), and one that
    never shrank let a draw of small outputs pass errors the native draw refuses. The mean magnitude rather than
    the RMS: a few extreme outputs (spikes) move it less. It never exceeds MAGNITUDE_FRACTION of the draw's own
    RMS, so a constant cannot match small outputs (defence constant_output, docs/defences.md)."""
    magnitude = mean_magnitude(ref) if native is not None else None
    if native is None or not magnitude:  # no native scale, or an all-zero output on this draw
        return effective_atol(ref, atol)
    return min(native.atol * magnitude / native.magnitude, _atol_at(output_rms(ref) or 0.0, math.inf))


def compare_outputs(out: list[Any], ref: list[Any], atol: float, rtol: float,
                    scales: list[NativeScale | None] | None = None) -> str | None:
    """None if `out` matches `ref`; else a one-paragraph mismatch report. `scales`: the native draw's
    (`native_scales`), so each output's atol follows its magnitude on this draw (`draw_atol`); None keeps
    `effective_atol`."""
    if len(out) != len(ref):
        return f"expected {len(ref)} output tensor(s), got {len(out)}"
    for i, (o, r) in enumerate(zip(out, ref)):
        problem = _compare_one(o, r, draw_atol(r, atol, _scale(scales, i)), rtol)
        if problem:
            return f"output {i}: {problem}"
    return None


def _scale(scales: list[NativeScale | None] | None, i: int) -> NativeScale | None:
    return scales[i] if scales is not None and i < len(scales) else None


def _compare_one(o: Any, r: Any, atol: float, rtol: float) -> str | None:
    if not isinstance(r, torch.Tensor):
        if isinstance(o, torch.Tensor):
            return f"expected {r!r}, got a tensor"
        if isinstance(o, (int, float)) and isinstance(r, (int, float)):
            o_f, r_f = float(o), float(r)  # a NaN matches only a NaN (it used to match anything)
            close = abs(o_f - r_f) <= atol + rtol * abs(r_f) or (math.isnan(o_f) and math.isnan(r_f))
        else:  # None, a string: equal or not (float() of them raised in the parent: no verdict)
            close = o == r
        return None if close else f"expected {r!r}, got {o!r}"
    if type(o) is not torch.Tensor:
        return f"expected a torch.Tensor, got {type(o).__name__}"
    if o.dtype != r.dtype:
        return f"dtype mismatch: expected {r.dtype}, got {o.dtype}"
    if tuple(o.shape) != tuple(r.shape):
        return f"shape mismatch: expected {tuple(r.shape)}, got {tuple(o.shape)}"
    o, r = real_values(o), real_values(r)
    o64, r64 = o.detach().to(torch.float64), r.detach().to(torch.float64)
    if r.is_floating_point():
        nan_ok = torch.isnan(o64) & torch.isnan(r64)
        inf_ok = torch.isinf(r64) & (o64 == r64)
        diff = (o64 - r64).abs()
        bad = ~((diff <= atol + rtol * r64.abs()) | nan_ok | inf_ok)
    else:
        bad = o64 != r64
    n_bad = int(bad.sum())
    if n_bad == 0:
        return None
    diff = (o64 - r64).abs().nan_to_num(float("inf"))
    idx = int(torch.argmax(torch.where(bad, diff, torch.zeros_like(diff))))
    flat_o, flat_r = o64.reshape(-1), r64.reshape(-1)
    return (
        f"{n_bad}/{r.numel()} elements differ beyond atol={atol:g}, rtol={rtol:g}; "
        f"worst at flat index {idx}: got {flat_o[idx].item():.6g}, expected {flat_r[idx].item():.6g}; "
        f"max abs diff {float(diff.max()):.4g}"
    )


INFLUENCE_THRESHOLD = 0.25
"""The candidate's response to an influence perturbation may miss at most this fraction of the
reference's response energy: sum((dc - dr)^2) <= 0.25 * sum(dr^2) (+ rounding allowance).
A kernel that ignores half its input (strided, first half) misses ~50-100%."""
INFLUENCE_ULPS = 128
"""Rounding allowance of each output element, in units of its dtype's epsilon times |ref| + |ref'|."""
INFLUENCE_CONCLUSIVE = 16.0
"""An output decides only when the reference's response energy exceeds 16x the rounding allowance."""


def influence_mismatch(out: list[Any], out_twin: list[Any], ref: list[Any], ref_twin: list[Any],
                       fraction: float) -> tuple[str | None, list[float]]:
    """Whether the candidate's outputs move with its inputs the way the reference's do.

    `out`/`ref` are the candidate's and the reference's outputs on a draw, `*_twin` on the
    same draw with the values at a random `fraction` of positions exchanged. With
    dr = ref_twin - ref and dc = out_twin - out, per floating output, the residual energy
    sum((dc - dr)^2) must stay below INFLUENCE_THRESHOLD * sum(dr^2) plus a rounding allowance
    (INFLUENCE_ULPS epsilons of |ref| + |ref_twin| per element); an output whose response is within
    INFLUENCE_CONCLUSIVE x the allowance decides nothing. An honest kernel's rounding is
    far below the reference's response whatever its summation order; a kernel that never reads
    some inputs, or returns an expectation, misses the part of the response they carry.
    Returns (mismatch report or None, the residual ratio of each floating output).
    """
    ratios: list[float] = []
    for i, outputs in enumerate(zip(out, out_twin, ref, ref_twin)):
        a, b, ra, rb = (real_values(x) for x in outputs)
        if not all(isinstance(x, torch.Tensor) for x in (a, b, ra, rb)) or not ra.is_floating_point():
            continue
        if a.shape != ra.shape or b.shape != rb.shape:
            continue  # the elementwise check reports it
        ra64, rb64 = ra.detach().to(torch.float64), rb.detach().to(torch.float64)
        dr = rb64 - ra64
        dc = b.detach().to(torch.float64) - a.detach().to(torch.float64)
        finite = torch.isfinite(dr) & torch.isfinite(dc)
        dr, dc = dr[finite], dc[finite]
        noise = torch.finfo(ra.dtype).eps * INFLUENCE_ULPS * (ra64.abs() + rb64.abs())[finite]
        response, residual, allowance = float(dr.pow(2).sum()), float((dc - dr).pow(2).sum()), float(noise.pow(2).sum())
        if response <= INFLUENCE_CONCLUSIVE * allowance:
            continue  # the reference barely moved (e.g. a sum over every element: exchanges keep it): no verdict
        ratio = residual / response
        ratios.append(ratio)
        if residual > INFLUENCE_THRESHOLD * response + allowance:
            moved = float(dc.pow(2).sum())
            return (f"output {i} does not follow its inputs: exchanging the values at {fraction:.0%} of the input "
                    f"positions moved the reference's output by rms {math.sqrt(response / max(dr.numel(), 1)):.4g} "
                    f"and the candidate's by rms {math.sqrt(moved / max(dc.numel(), 1)):.4g}, missing "
                    f"{min(ratio, 99.0):.0%} of the reference's change (at most {INFLUENCE_THRESHOLD:.0%} allowed): "
                    "a kernel that skips or subsamples input elements, or returns an expectation, does this"), ratios
    return None, ratios


SAMPLES = 2048


def _sample_indices(numel: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if numel <= SAMPLES:
        return torch.arange(numel)
    return torch.randint(0, numel, (SAMPLES,), generator=gen)


def fingerprint(tensors: list[Any], seed: int) -> list[torch.Tensor]:
    """Per output: its values at `SAMPLES` positions drawn from `seed` (all of a small output), float64 on the CPU.

    A timed output is judged by the elementwise rule at these positions: no false
    positives, and a stale or skipped result fails at almost every sampled position.
    """
    prints = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            prints.append(torch.tensor([float(t)], dtype=torch.float64))
            continue
        flat = real_values(t.detach()).reshape(-1)
        idx = _sample_indices(flat.numel(), seed + i).to(flat.device)
        prints.append(flat[idx].to("cpu", torch.float64))
    return prints


def fingerprint_bounds(ref: list[Any], seed: int, atol: float, rtol: float,
                       scales: list[NativeScale | None] | None = None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Reference values at the sampled positions and their elementwise tolerances (`compare_outputs`' rule)."""
    values = fingerprint(ref, seed)
    return values, [draw_atol(r, atol, _scale(scales, i)) + rtol * v.abs() for i, (r, v) in enumerate(zip(ref, values))]


def fingerprint_mismatch(got: list[torch.Tensor], ref: list[torch.Tensor], bound: list[torch.Tensor]) -> bool:
    """True if a timed output differs from the reference beyond tolerance at a sampled position."""
    if len(got) != len(ref):
        return True
    for g, r, b in zip(got, ref, bound):
        if g.shape != r.shape or not bool(((g - r).abs() <= b).all()):  # NaN fails too
            return True
    return False


def encode_prints(prints: list[torch.Tensor]) -> list[str]:
    """A fingerprint for a JSON message: each output's float64 values, base64 (2048 floats as JSON
    numbers cost ~1 ms to encode, on the child's side of every timed call)."""
    return [base64.b64encode(p.numpy().tobytes()).decode("ascii") for p in prints]


def decode_prints(value: Any) -> list[torch.Tensor] | None:
    """The fingerprint a child sent (`encode_prints`), or None when it is not one."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    try:
        raw = [base64.b64decode(v, validate=True) for v in value]
    except (binascii.Error, ValueError):
        return None
    if any(len(r) % 8 for r in raw):
        return None
    return [torch.frombuffer(bytearray(r), dtype=torch.float64) if r else torch.empty(0, dtype=torch.float64)
            for r in raw]


def storage_tensors(values: list[Any]) -> list[torch.Tensor]:
    """The tensors among `values` that have memory (empty ones left out), in order: `storage_spans`' owners."""
    return [v for v in values if isinstance(v, torch.Tensor) and v.numel() and v.untyped_storage().nbytes()]


def storage_spans(values: list[Any]) -> list[tuple[int, int]]:
    """The byte ranges of the tensors' storages (empty ones left out)."""
    spans = []
    for v in storage_tensors(values):
        start = v.untyped_storage().data_ptr()
        spans.append((start, start + v.untyped_storage().nbytes()))
    return spans


def share_memory(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    """Whether any span of `a` overlaps any span of `b` (`storage_spans`)."""
    return any(x < w and z < y for x, y in a for z, w in b)
