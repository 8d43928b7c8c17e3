"""The candidate's Python runs only on its turns (child/turns.py): code compiled from model_new.py that
starts while it is not the candidate's turn is recorded, however it was reached; on its turns nothing is."""

from __future__ import annotations

import sys

import pytest

from cuda_agent.sandbox_pool.harness.child.turns import CANDIDATE_FILE, Turns

SOURCE = """
def helper(x):
    return [y * 2 for y in x]


class Model:
    def forward(self, x):
        return helper(x)

    def __del__(self):
        pass


hook = lambda t: t
"""

MECHANISMS = ["setprofile"] + (["monitoring"] if hasattr(sys, "monitoring") else [])


@pytest.fixture(params=MECHANISMS)
def candidate(request):
    turns = Turns()
    code = compile(SOURCE, CANDIDATE_FILE, "exec")
    namespace: dict = {}
    turns.watch(code, monitoring=request.param == "monitoring")
    try:
        with turns.theirs():
            exec(code, namespace)
        yield turns, namespace
    finally:
        turns.stop()


def test_nothing_is_recorded_on_the_candidates_turns(candidate) -> None:
    turns, ns = candidate
    with turns.theirs():
        model = ns["Model"]()
        assert model.forward([1, 2]) == [2, 4]
        with turns.theirs():  # nested
            ns["hook"](3)
        del model
    assert turns.violations == []


@pytest.mark.parametrize("what", ["function", "method", "lambda", "finalizer"])
def test_the_candidates_code_outside_its_turns_is_recorded(candidate, what: str) -> None:
    turns, ns = candidate
    with turns.theirs():
        model = ns["Model"]()
    if what == "function":
        ns["helper"]([1])
    elif what == "method":
        model.forward([1])
    elif what == "lambda":
        ns["hook"](1)
    else:
        del model
    assert len(turns.violations) >= 1 and "ran outside" in turns.violations[0], turns.violations


def test_the_harnesss_own_code_is_not_the_candidates(candidate) -> None:
    turns, _ = candidate
    same_name = compile("def helper(x):\n    return x\n", "harness.py", "exec")
    ns: dict = {}
    exec(same_name, ns)
    ns["helper"](1)
    assert turns.violations == []
