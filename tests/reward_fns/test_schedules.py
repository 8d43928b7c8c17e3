"""The robust and raw speed-up schedules, and the RewardInfo built from a result."""

import pytest

from cuda_agent.reward_fns.options import RewardKind, RewardOptions
from cuda_agent.reward_fns.robust import is_faster
from cuda_agent.reward_fns.scoring import reward_info, schedule_reward
from cuda_agent.sandbox_pool.harness import EvalResult, EvalStatus


def robust_reward(result, margin=0.05):
    return schedule_reward(result, RewardOptions(margin=margin))


def speedup_reward(result, baseline="eager"):
    return schedule_reward(result, RewardOptions(kind="speedup", speedup_baseline=baseline))


def ok(runtime_us, eager_us=100.0, compile_us=80.0, **extra):
    return EvalResult(
        status=EvalStatus.OK, compiled=True, correct=True,
        runtime_us=runtime_us, eager_us=eager_us, torch_compile_us=compile_us, **extra,
    )


@pytest.mark.parametrize(
    ("t", "t0", "expected"),
    [(94.9, 100.0, True), (95.0, 100.0, False), (100.0, 100.0, False), (None, 100.0, False), (1.0, None, False)],
)
def test_b_is_strictly_more_than_the_margin(t, t0, expected):
    assert is_faster(t, t0, 0.05) is expected


@pytest.mark.parametrize(
    ("runtime_us", "expected"),
    [(50.0, 3.0), (75.0, 3.0), (76.0, 2.0), (94.0, 2.0), (96.0, 1.0), (500.0, 1.0)],
)
def test_robust_levels(runtime_us, expected):
    assert robust_reward(ok(runtime_us), margin=0.05) == expected


def test_faster_than_compile_only_is_one():
    assert robust_reward(ok(90.0, eager_us=80.0, compile_us=100.0)) == 1.0


@pytest.mark.parametrize(
    "result",
    [
        EvalResult(status=EvalStatus.COMPILE_ERROR, compiled=False),
        EvalResult(status=EvalStatus.INCORRECT, compiled=True, correct=False),
        EvalResult(status=EvalStatus.TIMEOUT),
        EvalResult(status=EvalStatus.CRASH),
        EvalResult(status=EvalStatus.VIOLATION, compiled=True, correct=True, violations=["torch op in forward"]),
        ok(10.0, violations=["speed-up above sanity bound"]),
    ],
)
def test_every_candidate_failure_is_minus_one(result):
    assert robust_reward(result) == -1.0
    assert speedup_reward(result) == -1.0


def test_infrastructure_failure_has_no_reward():
    with pytest.raises(ValueError):
        robust_reward(EvalResult(status=EvalStatus.INFRA_ERROR))


def test_speedup_reward():
    assert speedup_reward(ok(25.0)) == pytest.approx(4.0)
    assert speedup_reward(ok(40.0), baseline="compile") == pytest.approx(2.0)
    assert speedup_reward(EvalResult(status=EvalStatus.OK, compiled=True, correct=True)) == 1.0


def test_reward_info_keys_are_the_same_for_every_outcome():
    options = RewardOptions()
    infos = [
        reward_info(ok(50.0), options, "t1"),
        reward_info(EvalResult(status=EvalStatus.COMPILE_ERROR, compiled=False, error="boom"), options),
        reward_info(EvalResult(status=EvalStatus.INFRA_ERROR, error="worker died"), options),
        reward_info(ok(50.0), RewardOptions(kind=RewardKind.SPEEDUP)),
    ]
    key_sets = {tuple(info.to_extra_info()) for info in infos}
    assert len(key_sets) == 1
    assert "reward" not in key_sets.pop()  # veRL's validation appends its own "reward" list


def test_reward_info_values():
    good = reward_info(ok(50.0), RewardOptions(), "t1").to_extra_info()
    assert good["score"] == good["kernel_reward"] == 3.0
    assert good["faster_than_eager"] and good["faster_than_compile"] and not good["infra_failure"]
    infra = reward_info(EvalResult(status=EvalStatus.INFRA_ERROR), RewardOptions()).to_extra_info()
    assert infra["infra_failure"] and infra["kernel_reward"] is None and infra["score"] == 0.0
    speed = reward_info(ok(50.0), RewardOptions(kind="speedup")).to_extra_info()
    assert speed["score"] == pytest.approx(2.0) and speed["reward_kind"] == "speedup"


def test_reward_kwargs_override_the_evaluation_options():
    from cuda_agent.reward_fns.options import TaskSpec
    from cuda_agent.reward_fns.scoring import build_job
    from cuda_agent.sandbox_pool.harness import EvalOptions

    task = TaskSpec.model_validate({"problem_src": "x = 1\n", "device": "cpu", "task_id": "t"})
    default = build_job({"model_new.py": ""}, task, RewardOptions()).options
    assert default == EvalOptions(precision_policy=default.precision_policy, reward_margin=default.reward_margin)
    job = build_job({"model_new.py": ""}, task, RewardOptions(correctness_trials=9, checked_timed_calls=30))
    assert (job.options.correctness_trials, job.options.checked_timed_calls) == (9, 30)
    with pytest.raises(ValueError):
        RewardOptions(checked_timed_calls=0)
