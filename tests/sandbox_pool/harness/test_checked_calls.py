"""Timed outputs are checked at a secret random subset of the timed calls (`checked_timed_calls`).

Every call reports its fingerprint; only the chosen calls cost the parent a reference run. A kernel
must return faster, wrong outputs on about half of the calls to move the median, and then cannot
miss the checks.
"""

from __future__ import annotations

import json
from math import comb
from pathlib import Path

import torch
from test_hacks import HONEST, model_new

from cuda_agent.sandbox_pool.harness import EvalOptions, EvalStatus
from cuda_agent.sandbox_pool.harness.compare import (
    decode_prints,
    encode_prints,
    fingerprint,
    fingerprint_bounds,
    fingerprint_mismatch,
)
from cuda_agent.sandbox_pool.harness.problem import load_problem
from cuda_agent.sandbox_pool.harness.inputs import DISTRIBUTIONS, IID_DISTRIBUTIONS
from cuda_agent.sandbox_pool.harness.reference import checked_timed_calls, plan_timed_twins, prepare

PROBLEM = (Path(__file__).parent / "candidates" / "problem_scale_bias.py").read_text()


def test_the_checked_calls_are_a_secret_random_subset() -> None:
    assert checked_timed_calls(1, 30, None) == list(range(30))
    assert checked_timed_calls(1, 8, 10) == list(range(8))
    chosen = checked_timed_calls(12345, 30, 10)
    assert len(set(chosen)) == 10 and all(0 <= k < 30 for k in chosen)
    assert checked_timed_calls(12345, 30, 10) == chosen  # from the evaluation's secret seed, reproducibly
    subsets = [tuple(checked_timed_calls(seed, 30, 10)) for seed in range(300)]
    assert len(set(subsets)) >= 295  # a different choice per evaluation (C(30, 10) = 3e7 subsets)
    hits = [sum(k in s for s in subsets) for k in range(30)]
    assert min(hits) > 50 and max(hits) < 150  # every call as likely (expected 100 each)


def test_the_default_checks_catch_a_cheat_that_moves_the_median() -> None:
    """With the default options, faster wrong outputs on half the timed calls (what moving the median takes)
    escape the random checks with probability below 1e-3."""
    options = EvalOptions()
    n, k = options.timed_calls, min(options.checked_timed_calls or options.timed_calls, options.timed_calls)
    cheated = n // 2
    assert comb(n - cheated, k) / comb(n, k) < 1e-3


def test_prints_cross_the_wire_exactly_and_malformed_ones_are_refused() -> None:
    out = [torch.randn(10_000), 3.5]
    prints = fingerprint(out, 7)
    back = decode_prints(json.loads(json.dumps(encode_prints(prints))))
    assert back is not None and all(torch.equal(a, b) for a, b in zip(back, prints))
    values, bounds = fingerprint_bounds(out, 7, 1e-2, 1e-2)
    assert not fingerprint_mismatch(back, values, bounds)
    assert fingerprint_mismatch(fingerprint([out[0] + 1, 3.5], 7), values, bounds)  # a stale or wrong output
    assert fingerprint_mismatch(fingerprint([out[0]], 7), values, bounds)  # an output missing
    nan = out[0].clone()
    nan[::2] = float("nan")
    assert fingerprint_mismatch(fingerprint([nan, 3.5], 7), values, bounds)
    for bad in (None, "AAAAAAAAAAA=", [1.0], ["not base64!"], ["AAAA"]):
        assert decode_prints(bad) is None


def test_unchecked_calls_cost_no_reference_run(tmp_path: Path) -> None:
    steps: list[int] = []
    prepared = prepare(load_problem(PROBLEM), str(tmp_path), "cpu", seed=3, trials=4, timed_calls=12, atol=1e-4,
                       rtol=1e-4, print_seed=99, influence_checks=1, checked_calls=3, pause=lambda: steps.append(1))
    assert len(prepared.timing_draws) == len(prepared.print_seeds) == len(prepared.timing_prints) == 12
    assert [k for k, p in enumerate(prepared.timing_prints) if p is not None] == prepared.checked_calls
    assert len(prepared.checked_calls) == 3
    assert len(steps) == 4 + 1 + 3  # trials, the twin, the checked calls' reference runs (no timed twins asked)


def test_the_seeds_a_child_is_told_predict_nothing(tmp_path: Path) -> None:
    """After each timed call the child learns that call's print seed. Neither the next call's seed nor the
    choice of checked calls may follow from the ones it learned (they are keyed on a secret it never sees)."""
    prepared = prepare(load_problem(PROBLEM), str(tmp_path), "cpu", seed=3, trials=2, timed_calls=30, atol=1e-4,
                       rtol=1e-4, print_seed=12345, checked_calls=10)
    seeds = prepared.print_seeds
    assert len(set(b - a for a, b in zip(seeds, seeds[1:]))) == len(seeds) - 1  # no progression to extrapolate
    assert 12345 not in seeds  # the key itself is never one of them
    for told in seeds:  # taking any revealed seed for the key gives another choice of checked calls
        assert checked_timed_calls(told, 30, 10) != prepared.checked_calls


def test_wrong_outputs_on_the_timed_calls_are_caught_with_few_checks(evaluate_cpu) -> None:
    cheat = model_new(
        """
        self.calls += 1
        if self.calls > 10:  # the 7 trials and the warm-up are honest, every timed call is not
            return cuda_extension.uninitialized(x)
        return cuda_extension.scale_bias(x, self.scale, self.bias)
        """,
        init="self.calls = 0",
    )
    result = evaluate_cpu(cheat, profile=True, timed_calls=12, checked_timed_calls=2)
    assert result.status is EvalStatus.VIOLATION, result.error
    assert "timed call" in (result.error or "")


def test_an_honest_kernel_passes_and_the_log_says_how_many_outputs_were_checked(evaluate_cpu) -> None:
    result = evaluate_cpu(HONEST, profile=True, timed_calls=12, checked_timed_calls=4, timed_influence_checks=0)
    assert result.status is EvalStatus.OK, result.error
    assert "12 timed calls on fresh inputs, the outputs of 4 checked" in result.stages["profile"].log
    with_twins = evaluate_cpu(HONEST, profile=True, timed_calls=12, checked_timed_calls=4)
    assert with_twins.status is EvalStatus.OK, with_twins.error
    assert "1 of them influence twins of earlier calls" in with_twins.stages["profile"].log  # 12 calls: (0, 7) fits


def test_timed_twins_are_secret_later_calls_in_the_base_s_place_of_the_cycle(tmp_path: Path) -> None:
    prepared = prepare(load_problem(PROBLEM), str(tmp_path), "cpu", seed=3, trials=2, timed_calls=30, atol=1e-4,
                       rtol=1e-4, print_seed=777, checked_calls=10, timed_influence_checks=2)
    assert len(prepared.timed_twins) == 2
    for twin, base in prepared.timed_twins.items():
        assert twin > base and (twin - base) % len(DISTRIBUTIONS) == 0
        assert prepared.timing_draws[base].distribution in IID_DISTRIBUTIONS
        planned, of = prepared.timing_draws[twin], prepared.timing_draws[base]
        assert (planned.seed, planned.distribution) == (of.seed, of.distribution) and planned.perturb_fraction > 0
        assert prepared.print_seeds[twin] == prepared.print_seeds[base]  # compared at the same positions
        assert {twin, base} <= set(prepared.checked_calls)
    others = [plan_timed_twins(key, 30, 2) for key in range(200)]
    assert len({tuple(sorted(p.items())) for p in others}) > 50  # a different choice per evaluation
