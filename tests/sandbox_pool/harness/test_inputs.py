"""The trial distributions keep the support the reference needs; influence twins keep the values."""

from __future__ import annotations

import math

import pytest
import torch

from cuda_agent.sandbox_pool.harness.compare import influence_mismatch
from cuda_agent.sandbox_pool.harness.inputs import DISTRIBUTIONS, digest, draw, same_digest

STRUCTURED = [d for d in DISTRIBUTIONS if d != "native"]


def _inputs():
    return [
        torch.rand(64, 96),                       # [0, 1)
        torch.randn(32, 48) * 3,                  # signed, unbounded
        torch.rand(16, 8) * 2 - 1,                # [-1, 1)
        torch.rand(40, 20) * 10,                  # non-negative, unbounded
        torch.randperm(30),                       # a permutation (all distinct: left as drawn)
        (torch.rand(12, 12) > 0.5).float(),       # a 0/1 mask stored as floats
        torch.randn(20, 30).t(),                  # non-contiguous
        3.5,
    ]


@pytest.mark.parametrize("distribution", STRUCTURED)
def test_transforms_keep_the_support_and_leave_discrete_inputs_alone(distribution: str) -> None:
    native = draw(_inputs, 11, "native")
    out = draw(_inputs, 11, distribution)
    unit, signed, sym, nonneg, idx, mask, strided, scalar = out
    assert 0.0 <= float(unit.min()) and float(unit.max()) < 1.0
    assert float(sym.min()) >= float(native[2].min()) and float(sym.max()) <= float(native[2].max())
    assert float(nonneg.min()) >= 0.0
    assert torch.equal(torch.sign(signed), torch.sign(native[1])) or distribution == "affine"
    assert torch.equal(idx, native[4]) and torch.equal(mask, native[5]) and scalar == 3.5
    assert strided.stride() == native[6].stride()
    for t, n in zip(out[:4], native[:4]):
        assert t.dtype == n.dtype and t.shape == n.shape and bool(torch.isfinite(t).all())
        assert not torch.allclose(t, n)
    assert same_digest(digest(out), digest(draw(_inputs, 11, distribution)))  # reproducible


def test_structured_draws_break_what_subsampling_relies_on() -> None:
    # On native rand rows, half of a row predicts the whole row within 1%; on spikes, ramps and
    # per-row/column scales it does not (the point of these trials).
    def rows():
        return [torch.rand(64, 4096)]

    native = draw(rows, 5, "native")[0]
    assert ((native[:, ::2].sum(1) * 2 - native.sum(1)).abs() / native.sum(1)).max() < 0.03
    for distribution in ("spikes", "ramp", "row_col"):
        x = draw(rows, 5, distribution)[0]
        strided_err = ((x[:, ::2].sum(1) * 2 - x.sum(1)).abs() / x.sum(1)).max()
        first_err = ((x[:, :2048].sum(1) * 2 - x.sum(1)).abs() / x.sum(1)).max()
        assert strided_err > 0.05 or first_err > 0.05, distribution
        assert max(strided_err, first_err) > 0.05


def test_influence_twin_exchanges_values_and_keeps_them() -> None:
    base = draw(_inputs, 3, "native")
    twin = draw(_inputs, 3, "native", perturb_seed=99, perturb_fraction=0.5)
    for b, t in zip(base[:4], twin[:4]):
        changed = float((b != t).float().mean())
        assert 0.3 < changed < 0.6
        assert torch.equal(torch.sort(b.reshape(-1)).values, torch.sort(t.reshape(-1)).values)
    assert torch.equal(base[4], twin[4]) and torch.equal(base[5], twin[5])


def test_influence_mismatch_accepts_rounding_and_rejects_ignored_inputs() -> None:
    x = torch.rand(64, 8192)
    twin = draw(lambda: [x.clone()], 0, "native", perturb_seed=5, perturb_fraction=0.5)[0]
    ref, ref_twin = [x.double().sum(1).float()], [twin.double().sum(1).float()]
    honest = [x.sum(1)], [twin.sum(1)]
    assert influence_mismatch(*honest, ref, ref_twin, 0.5)[0] is None
    reordered = [x.flip(1).cumsum(1)[:, -1]], [twin.flip(1).cumsum(1)[:, -1]]  # sequential, other order
    assert influence_mismatch(*reordered, ref, ref_twin, 0.5)[0] is None
    strided = [x[:, ::2].sum(1) * 2], [twin[:, ::2].sum(1) * 2]
    report, ratios = influence_mismatch(*strided, ref, ref_twin, 0.5)
    assert report is not None and "does not follow its inputs" in report and ratios[0] > 0.5
    constant = [torch.full((64,), 4096.0)], [torch.full((64,), 4096.0)]
    assert influence_mismatch(*constant, ref, ref_twin, 0.5)[0] is not None


def test_influence_decides_nothing_where_the_reference_does_not_move() -> None:
    # A sum over every element is unchanged by exchanges: a noisy honest order must not be flagged.
    x = torch.rand(1 << 16)
    twin = draw(lambda: [x.clone()], 0, "native", perturb_seed=8, perturb_fraction=0.5)[0]
    ref, ref_twin = [x.double().sum().float().reshape(1)], [twin.double().sum().float().reshape(1)]
    noisy = [ref[0] * (1 + 3e-6)], [ref_twin[0] * (1 - 3e-6)]
    assert influence_mismatch(*noisy, ref, ref_twin, 0.5) == (None, [])


def test_same_digest_tolerates_reduction_order_of_a_cancelling_sum() -> None:
    """A sum that cancels to ~0 differs by rounding (~1e-16 of sum|x|) between thread counts: same draw."""
    from cuda_agent.sandbox_pool.harness.inputs import same_digest

    abs_sum = 3.0e7
    assert same_digest([[1.2e-9, abs_sum]], [[-3.5e-9, abs_sum * (1 + 1e-15)]])
    assert not same_digest([[1.0, abs_sum]], [[2.0, abs_sum]])  # a real difference still counts
    assert not same_digest([[0.5, 1.0]], [[0.6, 1.0]])


_DIGESTS_SCRIPT = """
import json, sys, torch
from cuda_agent.sandbox_pool.harness.inputs import DISTRIBUTIONS, digest, draw
torch.set_num_threads(int(sys.argv[1]))
get_inputs = lambda: [torch.randn(256), torch.randn(256, 2048)]
print(json.dumps([digest(draw(get_inputs, s, d)) for s in range(100, 112) for d in DISTRIBUTIONS]))
"""


def test_digests_of_one_draw_agree_across_thread_counts() -> None:
    """The evaluator's parent and its child may run torch with different thread counts: the
    reductions then round differently, and the draw must still count as the same."""
    import json
    import subprocess
    import sys

    runs = [json.loads(subprocess.run([sys.executable, "-c", _DIGESTS_SCRIPT, str(n)], check=True,
                                      capture_output=True, text=True).stdout) for n in (1, 2)]
    assert len(runs[0]) == len(runs[1]) > 0
    assert all(same_digest(a, b) for a, b in zip(*runs))
    # ...while a draw under another seed never does.
    assert not same_digest(runs[0][0], runs[0][len(DISTRIBUTIONS)])


def test_host_side_summaries_match_their_plain_definitions() -> None:
    """The one-sync forms of the parent's summaries (tolerance scale, digests, range fit) give what the
    plain formulas give, finite or not."""
    from cuda_agent.sandbox_pool.harness import inputs as inputs_mod
    from cuda_agent.sandbox_pool.harness.compare import MAGNITUDE_FRACTION, effective_atol

    def plain_atol(ref: torch.Tensor, atol: float) -> float:
        finite = ref.to(torch.float64)
        finite = finite[torch.isfinite(finite)]
        if finite.numel() == 0:
            return atol
        rms = float(finite.pow(2).mean().sqrt())
        return min(atol, max(MAGNITUDE_FRACTION * rms, 1e-12)) if rms > 0 else atol

    gen = torch.Generator().manual_seed(0)
    small = torch.randn(64, 33, generator=gen) * 1e-4
    cases = [small, small.half(), torch.randn(1000, generator=gen) * 50, torch.zeros(7),
             torch.tensor([1e-5, float("inf"), -2e-5]), torch.tensor([float("nan")] * 3), small.t()]
    for ref in cases:
        for atol in (1e-2, 1e-6):
            assert math.isclose(effective_atol(ref, atol), plain_atol(ref, atol), rel_tol=1e-9), (ref, atol)
    x = torch.randn(5, 6, generator=gen)
    assert inputs_mod.digest([x, 3]) == [[float(x.double().sum()), float(x.double().abs().sum())], [3.0]]
    out = torch.tensor([-3.0, 0.5, 2.0])
    assert inputs_mod._fit(out, -1.0, 1.0) == min(1.0 / 2.0, -1.0 / -3.0)


@pytest.mark.parametrize("distribution", STRUCTURED)
def test_integer_valued_data_keeps_its_levels(distribution: str) -> None:
    def pixels():
        return [torch.randint(0, 256, (32, 512)).float(), torch.randint(3, 9, (50,)).double()]

    native = draw(pixels, 4, "native")
    out = draw(pixels, 4, distribution)
    for t, n in zip(out, native):
        assert t.dtype == n.dtype and t.shape == n.shape and torch.equal(t, t.round())
        assert set(torch.unique(t).tolist()) <= set(torch.unique(n).tolist())  # its own levels only
        assert not torch.equal(t, n)
    twin = draw(pixels, 4, "native", perturb_seed=9, perturb_fraction=0.5)[0]
    assert torch.equal(twin.reshape(-1).sort().values, native[0].reshape(-1).sort().values)
    assert not torch.equal(twin, native[0])


@pytest.mark.parametrize("distribution", STRUCTURED)
def test_integer_tensors_get_structure_of_their_own_values(distribution: str) -> None:
    """uint8 images, token ids and labels are data: restructured from their own values (an index stays a valid
    index); booleans, two-level masks, permutations and sorted offsets stay as drawn."""
    def ints():
        return [torch.randint(0, 256, (32, 512), dtype=torch.uint8), torch.randint(0, 1000, (4, 300)),
                torch.randint(0, 2, (64,)), torch.rand(40) > 0.5, torch.randperm(500),
                torch.sort(torch.randint(0, 90, (8, 50)), dim=-1).values, torch.randint(0, 50, (100,)).cumsum(0)]

    native = draw(ints, 6, "native")
    out = draw(ints, 6, distribution)
    for t, n in zip(out[:2], native[:2]):
        assert t.dtype == n.dtype and t.shape == n.shape
        assert set(torch.unique(t).tolist()) <= set(torch.unique(n).tolist())  # its own values only
        assert not torch.equal(t, n)
    for t, n in zip(out[2:], native[2:]):
        assert torch.equal(t, n)
    twin = draw(ints, 6, "native", perturb_seed=3, perturb_fraction=0.5)
    assert torch.equal(twin[1].reshape(-1).sort().values, native[1].reshape(-1).sort().values)
    assert not torch.equal(twin[1], native[1]) and torch.equal(twin[4], native[4])
