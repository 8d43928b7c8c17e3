"""A verification that starts on the reference's first trial (harness/session.py, staged) and the
order of a candidate child's messages (`Protocol`): the child's steps overlap the rest of the
reference's preparation, every trial is still judged against its own reference output, a reference
that departs from its plan gets a new child, and a message out of the protocol's order is a violation."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalStatus, Evaluator, EvaluatorConfig
from cuda_agent.sandbox_pool.harness.problem import load_problem
from cuda_agent.sandbox_pool.harness.reference import plan_trials, prepare
from cuda_agent.sandbox_pool.harness.session import Protocol

from test_hacks import HONEST, model_new

CANDIDATES = Path(__file__).parent / "candidates"
KERNELS = (CANDIDATES / "kernels.cpp").read_text()
SCALE_BIAS = (CANDIDATES / "problem_scale_bias.py").read_text()

# The reference takes 0.15 s a run, so the preparation (trials, twins) outlasts a cached compile.
SLOW_REFERENCE = "import time\n" + SCALE_BIAS.replace(
    "        return x * self.scale + self.bias", "        time.sleep(0.15)\n        return x * self.scale + self.bias")
# Inputs sorted along rows, and a reference that refuses unsorted ones: the draws that scatter spikes
# or exchange values (influence twins) are replaced or dropped, so the reference departs from its plan.
SORTED_SLOW_REFERENCE = SLOW_REFERENCE.replace(
    "    def forward(self, x):\n",
    "    def forward(self, x):\n"
    "        if not bool((x[:, 1:] >= x[:, :-1]).all()):\n"
    "            raise ValueError('rows must be sorted')\n",
).replace("return [torch.randn(512, 1024)]", "return [torch.sort(torch.randn(512, 1024), dim=1).values]")
WRONG_BIAS = model_new("return cuda_extension.scale_bias(x, self.scale, self.scale)")  # the scale as its bias
FILES = {"model_new.py": HONEST, "kernels/k.cpp": KERNELS}


def test_the_plan_is_what_a_well_behaved_reference_prepares(tmp_path: Path) -> None:
    seen: list[int] = []
    prepared = prepare(load_problem(SCALE_BIAS), str(tmp_path), "cpu", seed=11, trials=6, timed_calls=3,
                       atol=1e-4, rtol=1e-4, print_seed=7, influence_checks=2,
                       progress=lambda p: seen.append(len(p.trial_outputs)))
    draws, twins = plan_trials(11, 6, 2)
    assert prepared.trial_draws == draws and prepared.influence == twins
    assert seen == list(range(1, 9)), "told of every trial output as it came in, in order"


def test_a_reference_that_refuses_a_draw_departs_from_its_plan(tmp_path: Path) -> None:
    prepared = prepare(load_problem(SORTED_SLOW_REFERENCE.replace("time.sleep(0.15)", "pass")), str(tmp_path),
                       "cpu", seed=11, trials=6, timed_calls=0, atol=1e-4, rtol=1e-4, print_seed=7,
                       influence_checks=2)
    assert prepared.trial_draws != plan_trials(11, 6, 2)[0]


def _job(problem: str, files: dict[str, str]) -> EvalJob:
    return EvalJob(problem_src=problem, files=files, device="cpu", options=EvalOptions(profile=False))


async def _evaluate_ahead(tmp_path: Path, problem: str, files: dict[str, str]):
    """Evaluate `files` with the reference prepared ahead, the build already cached (a first evaluation
    compiled it), so verification begins while the reference is being prepared."""
    evaluator = Evaluator(EvaluatorConfig(device="cpu", cache_dir=tmp_path))
    try:
        await evaluator.start()
        first = await evaluator.evaluate(_job(SCALE_BIAS, {**files, "model_new.py": HONEST}))
        assert first.compiled, first.error
        job = _job(problem, files)
        ahead = evaluator.prepare_ahead(job)
        result = await evaluator.evaluate(job, ahead=ahead)
        assert not evaluator.gate._shared, "the preparation's lease was given back"
        return result
    finally:
        await evaluator.close()


async def test_an_honest_candidate_passes_a_staged_verification(tmp_path: Path) -> None:
    result = await _evaluate_ahead(tmp_path, SLOW_REFERENCE, FILES)
    assert result.status is EvalStatus.OK and result.correct, result.error
    assert "(staged)" in result.stages["verify"].log, result.stages["verify"].log


async def test_a_timed_staged_verification_waits_for_the_whole_reference_before_its_timed_window(tmp_path: Path) -> None:
    evaluator = Evaluator(EvaluatorConfig(device="cpu", cache_dir=tmp_path))
    try:
        await evaluator.start()
        options = EvalOptions(timed_calls=4, checked_timed_calls=2, warmup_calls=1)
        first = await evaluator.evaluate(EvalJob(problem_src=SCALE_BIAS, files=FILES, device="cpu", options=options))
        assert first.status is EvalStatus.OK, first.error  # build and baselines cached
        job = EvalJob(problem_src=SLOW_REFERENCE, files=FILES, device="cpu", options=options, task_id="slow")
        result = await evaluator.evaluate(job, ahead=evaluator.prepare_ahead(job))
    finally:
        await evaluator.close()
    assert result.correct and result.runtime_us, result.error
    log = result.stages["verify"].log
    assert "(staged)" in log and "the whole reference" in log, log
    whole = float(log.split("the whole reference ")[1].split("s")[0])
    warm = float(log.split("| warm ")[1].split("s")[0])
    assert whole <= warm + 0.01, "the timed window was granted before the whole reference was in"


async def test_a_wrong_candidate_fails_a_staged_verification(tmp_path: Path) -> None:
    result = await _evaluate_ahead(tmp_path, SLOW_REFERENCE, {**FILES, "model_new.py": WRONG_BIAS})
    assert result.status is EvalStatus.INCORRECT and result.reward == -1.0, result.error
    assert "(staged)" in result.stages["verify"].log


async def test_a_reference_off_its_plan_gets_a_new_child_judged_on_the_whole_reference(tmp_path: Path) -> None:
    result = await _evaluate_ahead(tmp_path, SORTED_SLOW_REFERENCE, FILES)
    assert result.status is EvalStatus.OK and result.correct, result.error
    assert "new child (reference off its plan)" in result.stages["verify"].log


HONEST_ORDER = (["ready", "calibrated", "drawn", "loaded"] + [("trial", k) for k in range(3)]
                + ["ahead", "ahead", "warm", ("timed", 0), ("print", 0), ("timed", 1), ("print", 1), "timing"])


def _feed(protocol: Protocol, events) -> list[str | None]:
    out = []
    for item in events:
        event, k = item if isinstance(item, tuple) else (item, None)
        out.append(protocol.accept(event, k))
        if event == "trial" and out[-1] is None and k == protocol.trials - 1:
            protocol.trial_passed()
    return out


def test_the_protocol_accepts_the_childs_own_order() -> None:
    assert _feed(Protocol(3), HONEST_ORDER) == [None] * len(HONEST_ORDER)
    assert _feed(Protocol(3), ["ready", "error"]) == [None, None]


@pytest.mark.parametrize("forged", [
    ["ready", "calibrated", "drawn", "loaded", ("trial", 2)],  # straight to the last trial
    ["ready", "calibrated", "drawn", "loaded", ("trial", 0), ("trial", 0)],  # a trial twice
    ["ready", "calibrated", "drawn", "loaded", ("trial", "0")],  # not an index
    ["ready", "calibrated", "drawn", "loaded", ("trial", 0), "warm"],  # timed before the trials passed
    ["ready", "calibrated", "drawn", "loaded", ("trial", 0), "timing"],
    ["ready", "calibrated", "drawn", "loaded", ("trial", 0), ("timed", 0)],
    ["ready", "calibrated", "drawn", "loaded", "done"],  # the end, without a verdict
    ["ready", "ready"],
    ["ready", "drawn"],  # the calibration skipped
    ["calibrated"],
])
def test_the_protocol_refuses_any_other_order(forged) -> None:
    verdicts = _feed(Protocol(3), forged)
    assert verdicts[:-1] == [None] * (len(forged) - 1)
    assert verdicts[-1] is not None and "protocol was not followed" in verdicts[-1]
