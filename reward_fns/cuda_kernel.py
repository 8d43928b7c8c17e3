"""veRL entry point: ``compute_score`` for CUDA-kernel answers, loadable by file path.

Use it in any veRL 0.9.1 experiment::

    reward.custom_reward_function.path=/abs/path/to/reward_fns/cuda_kernel.py
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.kind=robust        # or speedup
    +reward.custom_reward_function.reward_kwargs.margin=0.05

veRL imports this file by path (not as a package module), so it uses absolute imports only.
It is a coroutine function: veRL's reward managers await it on their event loop.

Single-turn: the answer's fenced blocks (```cuda kernels/fused.cu, ```python model_new.py)
are the candidate files. Re-scoring: if ``extra_info.workspace_snapshot`` or the
``workspace_snapshot`` option names a saved workspace folder, its files are scored instead.
The returned dict holds ``score`` plus every ``RewardInfo`` key, the same keys on every sample;
``infra_failure`` flags samples to leave out of the update (the cuda_agent agent loops mask
them; see docs/verl.md).
"""

from __future__ import annotations

from typing import Any

from cuda_agent.reward_fns.answer import parse_answer
from cuda_agent.reward_fns.options import RewardOptions, TaskSpec
from cuda_agent.reward_fns.scoring import load_snapshot, score_files

__all__ = ["compute_score"]


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score one single-turn answer (or one saved workspace) of a cuda_agent task.

    Args:
        data_source: the row's data_source (unused; every cuda_agent source scores alike).
        solution_str: the decoded answer.
        ground_truth: the row's reward_model.ground_truth, the task id (unused: extra_info holds the task).
        extra_info: the row's extra_info: problem_src, device, precision_policy, task_id, and optionally
            workspace_snapshot.
        **kwargs: reward options (``RewardOptions``) from reward_kwargs.

    Returns:
        ``RewardInfo.to_extra_info()``: ``score`` plus the evaluation summary.
    """
    del data_source, ground_truth
    options = RewardOptions.from_kwargs(kwargs)
    task = TaskSpec.from_extra_info(extra_info, options)
    snapshot = (extra_info or {}).get("workspace_snapshot") or options.workspace_snapshot
    files = load_snapshot(snapshot) if snapshot else parse_answer(solution_str).files
    info = await score_files(files, task, options)
    return info.to_extra_info()
