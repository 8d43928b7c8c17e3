"""From candidate files to a ``RewardInfo``: build the job, evaluate it, apply the schedule.

Shared by ``compute_score`` (single-turn answers, saved snapshots) and the agent loop (the
final workspace), so every path scores the same way.
"""

from __future__ import annotations

import time
from pathlib import Path

from cuda_agent.errors import WorkspaceError
from cuda_agent.reward_fns.answer import MODEL_NEW
from cuda_agent.reward_fns.evaluation import evaluate
from cuda_agent.reward_fns.info import INFRA_FAILURE_SCORE, RewardInfo
from cuda_agent.reward_fns.options import RewardKind, RewardOptions, TaskSpec
from cuda_agent.reward_fns.robust import is_faster, robust_reward
from cuda_agent.reward_fns.speedup import speedup_reward
from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalResult, EvalStatus
from cuda_agent.sandbox_pool.harness.verdict import conservative_times
from cuda_agent.sandbox_pool.workspace import read_candidate_files


def build_job(files: dict[str, str], task: TaskSpec, options: RewardOptions) -> EvalJob:
    """The evaluation job of candidate files for a task."""
    eval_options = EvalOptions(precision_policy=task.precision_policy, reward_margin=options.margin)
    overrides = {name: getattr(options, name) for name in ("correctness_trials", "checked_timed_calls")
                 if getattr(options, name) is not None}
    if overrides:
        eval_options = EvalOptions.model_validate({**eval_options.model_dump(), **overrides})
    return EvalJob(
        problem_src=task.problem_src,
        files=files,
        device=task.device,
        options=eval_options,
        task_id=task.task_id,
    )


def is_candidate_success(result: EvalResult) -> bool:
    """Ok, correct and clean. Raises on infrastructure failures, which are nobody's outcome."""
    if result.is_infra_failure:
        raise ValueError("an infrastructure failure is not the candidate's outcome and has no reward")
    return result.status is EvalStatus.OK and result.correct is True and not result.violations


def schedule_reward(result: EvalResult, options: RewardOptions) -> float:
    """The configured schedule applied to a non-infrastructure result."""
    correct = is_candidate_success(result)
    runtime_us, eager_us, compile_us = conservative_times(result)  # CI ends: noise never earns speed
    if options.kind is RewardKind.SPEEDUP:
        baseline = eager_us if options.speedup_baseline == "eager" else compile_us
        return speedup_reward(correct=correct, runtime_us=runtime_us, baseline_us=baseline)
    return robust_reward(
        correct=correct,
        runtime_us=runtime_us,
        eager_us=eager_us,
        torch_compile_us=compile_us,
        margin=options.margin,
    )


def reward_info(result: EvalResult, options: RewardOptions, task_id: str | None = None) -> RewardInfo:
    """The reward record of one evaluation result."""
    infra = result.is_infra_failure
    kernel_reward = None if infra else schedule_reward(result, options)
    timed = result.runtime_us is not None
    runtime_us, eager_us, compile_us = conservative_times(result)
    return RewardInfo(
        score=INFRA_FAILURE_SCORE if kernel_reward is None else kernel_reward,
        kernel_reward=kernel_reward,
        reward_kind=options.kind.value,
        infra_failure=infra,
        status=result.status.value,
        compiled=result.compiled,
        correct=result.correct,
        violation=bool(result.violations) or result.status is EvalStatus.VIOLATION,
        faster_than_eager=is_faster(runtime_us, eager_us, options.margin) if timed else None,
        faster_than_compile=is_faster(runtime_us, compile_us, options.margin) if timed else None,
        **result.speed(),
        precision_policy=result.precision_policy.value,
        device=result.device,
        task_id=task_id or "",
        error=result.error or "",
        eval_wall_s=result.wall_s,
        **receipt_fields(result),
    )


def receipt_fields(result: EvalResult) -> dict[str, str]:
    """The result's timing receipt as RewardInfo's flat ``receipt_*`` strings (the seed is left out:
    veRL stacks every key, and an int-or-None column is not worth it)."""
    receipt = result.receipt.model_dump(exclude={"seed"})
    return {f"receipt_{key}": str(value) for key, value in receipt.items()}


def no_answer_result(task: TaskSpec, reason: str) -> EvalResult:
    """The candidate's failure when there is nothing to evaluate (no model_new.py)."""
    return EvalResult(
        status=EvalStatus.STATIC_CHECK_FAILED,
        error=reason,
        precision_policy=task.precision_policy,
        device=task.device,
    )


async def evaluate_files(files: dict[str, str], task: TaskSpec, options: RewardOptions) -> EvalResult:
    """Evaluate candidate files against the task (the evaluator's full result: stages, receipt)."""
    started = time.monotonic()
    if MODEL_NEW not in files:
        result = no_answer_result(task, f"no {MODEL_NEW} in the candidate's files")
    else:
        job = build_job(files, task, options)
        result = await evaluate(
            job,
            pool_address=options.resolved_pool_address(),
            timeout_s=options.eval_timeout_s,
            embedded_devices=options.embedded_devices,
            window_check=options.window_check,
        )
    if result.wall_s is None:
        result = result.model_copy(update={"wall_s": time.monotonic() - started})
    return result


async def score_files(files: dict[str, str], task: TaskSpec, options: RewardOptions) -> RewardInfo:
    """Evaluate candidate files against the task and score them."""
    return reward_info(await evaluate_files(files, task, options), options, task.task_id)


def load_snapshot(folder: str | Path) -> dict[str, str]:
    """The candidate files (model_new.py, kernels/*) of a saved workspace folder."""
    root = Path(folder)
    if not root.is_dir():
        raise WorkspaceError(f"workspace snapshot {root} is not a directory")
    return read_candidate_files(root)
