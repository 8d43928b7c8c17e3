"""The order of a candidate child's messages (harness/session.py `Protocol`): the candidate's code runs in
the child's process and can write to its pipe, so the parent accepts only the protocol's order; a trial
out of turn, the timed phase before every trial passed, a step twice or skipped, or an end without a
verdict is a violation. Every honest evaluation of the suite (CPU and GPU) goes through it too."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness.session import Protocol

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


def test_only_errors_before_the_candidate_code_can_be_the_harnesss() -> None:
    protocol = Protocol(3)
    seen = []
    for event, k in [("ready", None), ("calibrated", None), ("drawn", None), ("loaded", None), ("trial", 0)]:
        seen.append(protocol.before_candidate_code())
        protocol.accept(event, k)
    assert seen == [True, True, True, False, False]


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


# -- the same through a real evaluation: a kernel that writes forged messages to its child's pipe -----------
CANDIDATES = Path(__file__).parent / "candidates"
PROBLEM = (CANDIDATES / "problem_scale_bias.py").read_text()
FILES = {"kernels/k.cpp": (CANDIDATES / "kernels.cpp").read_text(),
         "kernels/forge.cpp": (CANDIDATES / "forge.cpp").read_text()}


def _model_new(init: str = "", forward: str = "") -> str:
    """model_new.py: the honest kernel, with `init` run at construction and `forward` before every call."""
    return textwrap.dedent("""\
        import torch
        import torch.nn as nn
        import cuda_extension


        class ModelNew(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.scale = nn.Parameter(torch.ones(dim))
                self.bias = nn.Parameter(torch.zeros(dim))
                self.sent = 0
        """) + (f"        {init}\n" if init else "") + "\n    def forward(self, x):\n" + \
        (f"        {forward}\n" if forward else "") + \
        "        return cuda_extension.scale_bias(x, self.scale, self.bias)\n"


def _forging(when: str, message: dict) -> str:
    """model_new.py: the honest kernel, and `message` forged at construction or at the first forward."""
    forge = f"cuda_extension.forge({json.dumps(json.dumps(message))})"
    if when == "init":
        return _model_new(init=forge)
    return _model_new(forward=f"self.sent = self.sent or {forge}")


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory) -> Path:
    """One cache for the cases: the kernels are built once."""
    return tmp_path_factory.mktemp("forge_cache")


@pytest.mark.parametrize(("when", "message"), [
    ("init", {"event": "done"}),  # the end before any trial: was ok with no reward
    ("init", {"event": "warm", "calls": 3}),  # the timed window before the trials
    ("forward", {"event": "trial", "k": 6, "layout": []}),  # straight to the last trial
    # A harness or problem failure (no reward, the sample left out of training) claimed by candidate code:
    ("init", {"event": "error", "stage": "setup", "kind": "RuntimeError", "message": "CUDA unavailable"}),
    ("forward", {"event": "error", "stage": "draw", "kind": "RuntimeError", "message": "get_inputs failed"}),
    # a field of the wrong shape: it raised in the parent (no verdict, the sample left out) before 2026-12-04
    ("forward", {"event": "trial", "k": 0, "violations": 5, "layout": []}),
], ids=["done_at_construction", "warm_at_construction", "last_trial_first", "setup_error_at_construction",
        "draw_error_at_first_call", "malformed_trial"])
def test_forged_messages_are_a_violation(build_cache: Path, monkeypatch, when: str, message: dict) -> None:
    from cuda_agent.sandbox_pool.harness import EvalStatus

    result = _evaluate_forging(build_cache, monkeypatch, _forging(when, message), profile=False)
    assert result.status is EvalStatus.VIOLATION and result.reward == -1.0, (result.status, result.error)
    assert "protocol was not followed" in (result.error or ""), result.error


@pytest.mark.parametrize("raw", ["not json", "[1, 2]"], ids=["not_json", "not_an_object"])
def test_bytes_that_are_no_message_are_a_violation(build_cache: Path, monkeypatch, raw: str) -> None:
    """Before 2026-12-04 the parent skipped them: the pipe carried anything the candidate wrote, unjudged."""
    from cuda_agent.sandbox_pool.harness import EvalStatus

    model_new = _model_new(forward=f"self.sent = self.sent or cuda_extension.forge({json.dumps(raw)})")
    result = _evaluate_forging(build_cache, monkeypatch, model_new, profile=False)
    assert result.status is EvalStatus.VIOLATION and result.reward == -1.0, (result.status, result.error)
    assert "a message of no known kind" in (result.error or ""), result.error


def test_a_message_after_the_last_step_is_a_violation(build_cache: Path, monkeypatch) -> None:
    """The trials' last outputs are freed after the harness reported the last trial (the child holds the last
    two calls' outputs while the next call runs: `check_fresh`), and the deleter of the 7th freed, the
    candidate's code, forges a message: the parent waits for the child's `done` and finds
    it instead (before 2026-12-04 the parent stopped listening at the last step, so a `timing` report of
    the candidate's choosing, sent this way after the last timed call, would have been its verdict)."""
    from cuda_agent.sandbox_pool.harness import EvalStatus

    forged = json.dumps(json.dumps({"event": "timing", "samples_us": [1.0] * 30}))
    model_new = _model_new().replace(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)",
        f"return cuda_extension.forge_when_freed(cuda_extension.scale_bias(x, self.scale, self.bias), {forged}, 7)")
    result = _evaluate_forging(build_cache, monkeypatch, model_new, profile=False)
    assert result.status is EvalStatus.VIOLATION and result.reward == -1.0, (result.status, result.error)
    assert "'timing' after the last step, where its end was due" in result.error, result.error


def _evaluate_forging(build_cache: Path, monkeypatch, model_new: str, profile: bool,  # noqa: ANN001, ANN202
                      files: dict[str, str] | None = None, problem: str = PROBLEM):
    from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, Evaluator, EvaluatorConfig
    from cuda_agent.sandbox_pool.harness import evaluator as evaluator_mod
    from cuda_agent.sandbox_pool.harness.static_check import StaticCheckReport

    async def no_symbol_check(objects):  # noqa: ANN001, ANN202
        return []

    # The symbol check refuses forge.cpp (raw writes, socket options, closing descriptors: before 2026-12-04
    # it did not; test_hacks.py::test_reaching_the_harness_descriptors_is_refused_at_the_build): let it
    # through to try the checks behind it.
    monkeypatch.setattr(evaluator_mod, "check_candidate", lambda files: StaticCheckReport())
    monkeypatch.setattr(evaluator_mod, "check_object_symbols", no_symbol_check)
    job = EvalJob(problem_src=problem, files=files or {**FILES, "model_new.py": model_new}, device="cpu",
                  options=EvalOptions(profile=profile, seed=5))

    async def evaluate():  # noqa: ANN202
        async with Evaluator(EvaluatorConfig(device="cpu", cache_dir=build_cache)) as evaluator:
            return await evaluator.evaluate(job)

    return asyncio.run(evaluate())


@pytest.mark.parametrize(("init", "forward", "says"), [
    # no stamps from the timed calls: before 2026-12-04 the outside bound was simply off
    ("cuda_extension.close_clock()", "", "missing"),
    # call 0's window sent again at every call, the last one ~0 long: before, the bound was ~0 (no check)
    ("", "cuda_extension.stamp('s:c:0') + cuda_extension.stamp('e:c:0')", "sent twice"),
], ids=["clock_closed", "window_resent"])
def test_a_candidate_that_touches_the_outside_clock_is_a_violation(build_cache: Path, monkeypatch, init: str,
                                                                  forward: str, says: str) -> None:
    from cuda_agent.sandbox_pool.harness import EvalStatus

    result = _evaluate_forging(build_cache, monkeypatch, _model_new(init, forward), profile=True)
    assert result.status is EvalStatus.VIOLATION and result.reward == -1.0, (result.status, result.error)
    assert "outside clock was tampered with" in result.error and says in result.error, result.error


def _short_calls(init: str) -> tuple[str, dict[str, str]]:
    """(problem, files): the examples' diag_matmul narrowed to 128 columns, whose honest CPU kernel's calls take
    ~150-200 us on the 2-core VM (benchmarks/harness/RESULTS.md), with `init` run at construction."""
    root = Path(__file__).resolve().parents[3] / "examples"
    problem = (root / "problems/diag_matmul.py").read_text()
    assert "\nM = 2048\n" in problem
    files = {path.relative_to(root / "solutions/diag_matmul/cpu_fast").as_posix(): path.read_text()
             for path in (root / "solutions/diag_matmul/cpu_fast").rglob("*") if path.is_file()}
    files["kernels/bend.cpp"] = (CANDIDATES / "bend_timer.cpp").read_text()
    files["model_new.py"] = files["model_new.py"].replace("super().__init__()", f"super().__init__()\n        {init}")
    return problem.replace("\nM = 2048\n", "\nM = 128\n"), files


@pytest.mark.parametrize(("factor", "calls"), [(1.0, "2ms"), (0.6, "2ms"), (1.0, "short"), (0.7, "short")],
                         ids=["honest", "bent_to_0.6", "honest_short", "bent_to_0.7_short"])
def test_a_timer_bent_to_report_less_disagrees_with_the_outside_clock(build_cache: Path, monkeypatch,
                                                                      factor: float, calls: str) -> None:
    """Red team, 2026-12-04 (night): native code made the harness's timer run 0.55x as fast, above the outside
    bound's half, and turned reward 1 into 3. On a CPU the outside clock's stamps bracket the same call as the
    timer, so each call's two clocks must agree (`clock.cpu_agreement`, judged where the stamps are read at the
    child's messages only); the honest twins spend the same time a call and pass. The short pair: until
    2026-12-05 calls under 300 us were not judged, and a 0.6x timer on a ~250 us kernel passed in CI."""
    from cuda_agent.sandbox_pool.harness import EvalStatus, clock
    from cuda_agent.sandbox_pool.harness.compiler import builder

    monkeypatch.setattr(builder, "_read_memo", lambda obj: [])  # the build refuses bend_timer.cpp's source
    init = f"cuda_extension.bend_timer({factor})" if factor != 1.0 else ""
    if calls == "short":
        problem, files = _short_calls(init)
    else:
        problem = PROBLEM
        files = {"kernels/k.cpp": FILES["kernels/k.cpp"], "kernels/bend.cpp": (CANDIDATES / "bend_timer.cpp").read_text(),
                 "model_new.py": _model_new(init, "cuda_extension.spin_us(2000.0)")}
    result = _evaluate_forging(build_cache, monkeypatch, files["model_new.py"], profile=True, files=files,
                               problem=problem)
    if factor == 1.0:
        assert result.status is EvalStatus.OK, (result.status, result.error)
        assert "(judged)" in result.stages["profile"].log, result.stages["profile"].log
    else:
        assert result.status is EvalStatus.VIOLATION and result.reward == -1.0, (result.status, result.error)
        assert "both clocks bracket the same call" in result.error, result.error
    assert clock.read_quietly("cpu"), clock.queue_capacity()  # (a kernel that holds too few unread stamps)
