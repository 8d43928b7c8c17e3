"""The catalogue of defences holds to the code: its enforcers exist, its tests exist, every hack case of
test_hacks.py is one defence's, and docs/defences.md is the catalogue rendered."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import test_hacks
from defence_cases import TEST_HACKS

from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.harness.defences import CATALOGUE, by_id, claiming
from cuda_agent.sandbox_pool.harness.defences.model import ENFORCER_ROOT
from cuda_agent.sandbox_pool.harness.defences.render import markdown
from cuda_agent.sandbox_pool.harness.policy import symbol_violations
from cuda_agent.sandbox_pool.harness.static_check import source_violations

ROOT = Path(__file__).resolve().parents[3]
HACK_CASES = ("CHEATS", "KERNEL_CHEATS", "LEAVES_CODE_BEHIND", "MACRO_HIDDEN", "RED_TEAM_MODEL_NEW", "PROCESS_HOOKS",
              "RED_TEAM_KERNELS", "NOT_FRESH")
"""test_hacks.py's dictionaries of cheating candidates."""


def _resolve(dotted: str) -> object:
    parts = f"{ENFORCER_ROOT}.{dotted}".split(".")
    for split in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            target = getattr(target, name)
        return target
    raise ModuleNotFoundError(dotted)


def test_ids_are_unique_and_the_public_classes_come_in_order() -> None:
    ids = [d.id for d in CATALOGUE]
    assert len(ids) == len(set(ids))
    threats = [d.threat for d in CATALOGUE if d.threat is not None]
    assert threats == sorted(threats) and set(threats) == set(range(1, 26)), "every public class 1-25, in order"


@pytest.mark.parametrize("defence", CATALOGUE, ids=lambda d: d.id)
def test_every_enforcer_exists(defence) -> None:
    for name in defence.enforced_by:
        assert _resolve(name) is not None, name


@pytest.mark.parametrize("defence", CATALOGUE, ids=lambda d: d.id)
def test_every_named_test_exists(defence) -> None:
    assert defence.hacks or defence.untested, f"{defence.id}: no hack test and no word on why"
    assert not set(defence.hacks) & set(defence.honest)
    for ref in defence.hacks + defence.honest:
        path, case = ref.split("::")
        text = (ROOT / path).read_text()
        assert re.search(rf'"{re.escape(case)}"|def {re.escape(case)}\(', text), f"{defence.id}: {ref} not found"


def test_every_hack_case_is_exactly_one_defences() -> None:
    for dictionary in HACK_CASES:
        for case in getattr(test_hacks, dictionary):
            owners = [d.id for d in CATALOGUE if f"{TEST_HACKS}::{case}" in d.hacks]
            assert len(owners) == 1, (dictionary, case, owners)
    assert claiming(TEST_HACKS, "01_torch_fallback") is by_id("torch_fallback")
    with pytest.raises(KeyError, match="catalogue.py"):
        claiming(TEST_HACKS, "not_a_case")
    with pytest.raises(KeyError, match="known: torch_fallback"):
        by_id("no_such_defence")


def test_the_doc_is_the_catalogue_rendered() -> None:
    committed = (ROOT / "docs" / "defences.md").read_text()
    assert committed == markdown(), "docs/defences.md is stale: cuda-agent defences --markdown > docs/defences.md"


@pytest.mark.parametrize("code", [
    "cudaStreamAttrValue v; v.accessPolicyWindow.hitRatio = 1.0f;",
    "cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);",
    "cudaCtxResetPersistingL2Cache();",
])
def test_l2_persistence_controls_are_refused(code: str) -> None:
    """l2_persistence: the controls of a persisting L2 window are refused in the sources, and the reset the
    timer makes (which a candidate could undo or time) in the symbols."""
    assert any("L2 persistence" in v for v in source_violations("kernels/k.cu", code)), code
    assert symbol_violations(["cudaCtxResetPersistingL2Cache"])


def test_an_implausible_speed_up_is_a_violation() -> None:
    """metric_gaming: a time driven to nearly nothing is no 3."""
    from test_baselines import _result

    from cuda_agent.sandbox_pool.harness.verdict import finish

    result = _result([1.0] * 30, [5_000.0] * 30, [5_000.0] * 30)
    finish(result, margin=0.05, sanity_bound=1000)
    assert result.status is EvalStatus.VIOLATION and result.reward == -1.0
    assert "sanity bound" in result.error


def test_every_reason_of_the_source_and_symbol_checks_is_one_defences() -> None:
    from cuda_agent.sandbox_pool.harness.policy import FORBIDDEN_SOURCE_PATTERNS, FORBIDDEN_SYMBOL_PATTERNS

    for _, why in FORBIDDEN_SOURCE_PATTERNS + FORBIDDEN_SYMBOL_PATTERNS:
        owners = [d.id for d in CATALOGUE if why in d.policy_reasons]
        assert len(owners) == 1, (why, owners)
    reasons = {why for _, why in FORBIDDEN_SOURCE_PATTERNS + FORBIDDEN_SYMBOL_PATTERNS}
    assert {why for d in CATALOGUE for why in d.policy_reasons} <= reasons, "a reason no check gives any more"


def test_the_checks_name_the_defence_that_refuses_what_they_found() -> None:
    assert source_violations("kernels/k.cu", "cudaCtxResetPersistingL2Cache();")[0].endswith("[defence l2_persistence]")
    assert symbol_violations(["write"]) == ["the extension imports write (file descriptor I/O) [defence forged_messages]"]
    assert symbol_violations(["at::_ops::add_Tensor::call(at::Tensor const&)"])[0].endswith("[defence torch_fallback]")
