"""Every output dtype the child may return is judged on all of its values (red team 2026-12-05: a complex output
was judged by its real part alone, so a kernel that never wrote the imaginary halves was `ok`)."""

from __future__ import annotations

import pytest
import torch

from cuda_agent.sandbox_pool.harness.compare import (
    compare_outputs,
    fingerprint,
    fingerprint_bounds,
    fingerprint_mismatch,
    influence_mismatch,
)
from cuda_agent.sandbox_pool.harness.outputs import _DTYPES

ATOL = RTOL = 1e-2


def _reference(dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    if dtype.is_complex:
        return torch.complex(torch.randn(64, 64, generator=gen), torch.randn(64, 64, generator=gen)).to(dtype)
    if dtype == torch.bool:
        return torch.rand(64, 64, generator=gen) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(64, 64, generator=gen) * 4).to(dtype)
    return torch.randint(0, 100, (64, 64), generator=gen).to(dtype)


def _half_written(ref: torch.Tensor) -> torch.Tensor:
    """Half of the output's values left wrong: a complex output's imaginary parts, any other's odd elements."""
    if ref.is_complex():
        return torch.complex(ref.real, torch.zeros_like(ref.real))
    wrong = ref.clone()
    flat = wrong.view(-1)
    flat[1::2] = ~flat[1::2] if ref.dtype == torch.bool else (flat[1::2].to(torch.float32) * 0 + 77).to(ref.dtype)
    return wrong


@pytest.mark.parametrize("name", sorted(_DTYPES))
def test_every_value_of_every_dtype_is_judged(name: str) -> None:
    ref = _reference(_DTYPES[name])
    assert compare_outputs([ref.clone()], [ref], ATOL, RTOL) is None
    cheat = _half_written(ref)
    assert compare_outputs([cheat], [ref], ATOL, RTOL) is not None
    values, bounds = fingerprint_bounds([ref], seed=3, atol=ATOL, rtol=RTOL)
    assert not fingerprint_mismatch(fingerprint([ref.clone()], seed=3), values, bounds)
    assert fingerprint_mismatch(fingerprint([cheat], seed=3), values, bounds)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_a_complex_output_must_follow_its_inputs_in_both_parts(dtype: torch.dtype) -> None:
    ref = _reference(dtype)
    ref_twin = ref.clone()
    ref_twin.view(-1)[::3] *= -1  # the reference's response to a perturbation, in both parts
    honest = influence_mismatch([ref.clone()], [ref_twin.clone()], [ref], [ref_twin], 0.33)
    assert honest[0] is None
    real_only = torch.complex(ref_twin.real, ref.imag)  # the imaginary parts never move
    report, _ = influence_mismatch([ref.clone()], [real_only], [ref], [ref_twin], 0.33)
    assert report is not None and "does not follow its inputs" in report
