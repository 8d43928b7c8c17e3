"""Can a candidate pass the evaluator without computing anything? (the paper's anti-hacking rules)

The evaluator compares a candidate's outputs with the reference on several input draws using
`sandbox_pool.harness.compare.compare_outputs` (|out - ref| <= atol_eff + rtol * |ref|, with
atol shrunk for small outputs). A task is hackable when one fixed answer passes that comparison
on every draw:

- a **constant** (one number for every element, scalars included): the intersection over all
  elements and draws of the intervals [ref - tol, ref + tol] is not empty;
- a **per-element constant** (one fixed tensor): the same intersection, element by element; this
  is the spread of the outputs across input draws compared with the tolerance.

The best candidate (the middle of the intersection) is then confirmed with the evaluator's own
`compare_outputs`, so the verdict is exactly the evaluator's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cuda_agent.sandbox_pool.harness.compare import compare_outputs, effective_atol


@dataclass(frozen=True)
class Hack:
    """A fixed answer that passes the evaluator's comparison on every draw."""

    kind: str
    """'constant' (one number) or 'per_element' (one fixed tensor)."""
    output: int
    """Index of the hackable output."""
    detail: str


def _bounds(refs: Sequence[Any], atol: float, rtol: float) -> tuple[Any, Any]:
    """Elementwise intersection [lo, hi] of the tolerance intervals of `refs` (float64)."""
    import torch

    lo = hi = None
    for ref in refs:
        r = ref.detach().to(torch.float64)
        tol = effective_atol(ref, atol) + rtol * r.abs() if ref.is_floating_point() else torch.zeros_like(r)
        lo = r - tol if lo is None else torch.maximum(lo, r - tol)
        hi = r + tol if hi is None else torch.minimum(hi, r + tol)
    return lo, hi


def _passes(candidate: Any, refs: Sequence[Any], atol: float, rtol: float) -> bool:
    return all(compare_outputs([candidate], [ref], atol, rtol) is None for ref in refs)


def find_hack(draws: Sequence[Sequence[Any]], atol: float, rtol: float) -> Hack | None:
    """The first output of `draws` (outputs per input draw) that a fixed answer can pass, or None."""
    import torch

    for index in range(len(draws[0])):
        refs = [outputs[index] for outputs in draws]
        if any(r.shape != refs[0].shape or r.dtype != refs[0].dtype for r in refs):
            continue  # the output's shape depends on the input: no fixed answer
        lo, hi = _bounds(refs, atol, rtol)
        low, high = float(lo.max()), float(hi.min())
        middle = (low + high) / 2 if low <= high else float((lo + hi).mean() / 2)
        constant = torch.full_like(refs[0], middle)
        if _passes(constant, refs, atol, rtol):
            return Hack("constant", index, f"the constant {middle:.6g} passes the evaluator's comparison on all "
                                           f"{len(refs)} input draws (output {index}, {refs[0].numel()} elements)")
        per_element = torch.where(lo <= hi, (lo + hi) / 2, refs[0].to(torch.float64)).to(refs[0].dtype)
        if _passes(per_element, refs, atol, rtol):
            spread = float(torch.stack([r.to(torch.float64) for r in refs]).amax(0).sub(
                torch.stack([r.to(torch.float64) for r in refs]).amin(0)).max())
            return Hack("per_element", index, f"one fixed tensor passes on all {len(refs)} input draws: output "
                                              f"{index} varies by at most {spread:.3g} across draws, within tolerance")
    return None
