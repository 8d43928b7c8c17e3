"""compute_score: loading by file path, options, tasks, snapshots, answers that need no evaluator."""

import inspect
from pathlib import Path

import pytest

from cuda_agent.errors import ConfigError, WorkspaceError
from cuda_agent.reward_fns.options import RewardOptions, TaskSpec
from cuda_agent.reward_fns.scoring import load_snapshot

REPO = Path(__file__).resolve().parents[2]
PROBLEM = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
EXTRA_INFO = {"task_id": "t1", "problem_src": PROBLEM, "device": "cpu", "precision_policy": "paper", "index": 0}


@pytest.fixture(scope="module")
def compute_score():
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from omegaconf import OmegaConf

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": str(REPO / "reward_fns" / "cuda_kernel.py"),
                    "name": "compute_score",
                    "reward_kwargs": {"kind": "robust", "margin": 0.05},
                }
            }
        }
    )
    return get_custom_reward_fn(config)  # veRL's own loader: by file path, kwargs merged


def test_veRL_loads_it_by_path_as_a_coroutine_function():
    from verl.utils.import_utils import load_extern_object

    raw = load_extern_object(str(REPO / "reward_fns" / "cuda_kernel.py"), "compute_score")
    assert inspect.iscoroutinefunction(raw)


async def test_answer_without_model_new_is_minus_one(compute_score):
    result = await compute_score(
        data_source="cuda_agent/ops", solution_str="no code here", ground_truth="t1", extra_info=dict(EXTRA_INFO)
    )
    assert result["score"] == -1.0
    assert result["status"] == "static_check_failed"
    assert result["infra_failure"] is False
    assert result["task_id"] == "t1"


async def test_unknown_option_is_a_config_error(compute_score):
    from cuda_agent.reward_fns.cuda_kernel import compute_score as raw

    with pytest.raises(ConfigError, match="margn"):
        await raw("s", "", "t1", dict(EXTRA_INFO), margn=0.1)


def test_veRL_injected_kwargs_are_not_options():
    injected = {"reward_router_address": "x", "reward_model_tokenizer": None}
    options = RewardOptions.from_kwargs({**injected, "kind": "speedup"})
    assert options.kind.value == "speedup"


def test_task_spec_requires_problem_and_device():
    with pytest.raises(ConfigError, match="problem_src"):
        TaskSpec.from_extra_info({"device": "cpu"}, RewardOptions())
    with pytest.raises(ConfigError, match="device"):
        TaskSpec.from_extra_info({"problem_src": PROBLEM}, RewardOptions())
    task = TaskSpec.from_extra_info({"problem_src": PROBLEM}, RewardOptions(device="cuda", precision_policy="strict"))
    assert task.device == "cuda" and task.precision_policy.value == "strict"


def test_snapshot_keeps_only_candidate_files(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "model_new.py").write_text("new")
    (tmp_path / "model.py").write_text("reference")
    (tmp_path / "kernels" / "a.cpp").write_text("a")
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "verification.py").write_text("x")
    assert load_snapshot(tmp_path) == {"model_new.py": "new", "kernels/a.cpp": "a"}
    with pytest.raises(WorkspaceError):
        load_snapshot(tmp_path / "missing")


async def test_snapshot_without_model_new_is_minus_one(compute_score, tmp_path):
    info = dict(EXTRA_INFO, workspace_snapshot=str(tmp_path))
    result = await compute_score(data_source="s", solution_str="", ground_truth="t1", extra_info=info)
    assert result["score"] == -1.0 and result["status"] == "static_check_failed"


async def test_unreachable_pool_is_an_infrastructure_failure(compute_score, tmp_path):
    """Not the candidate's -1: flagged so the agent loops exclude the sample from the update."""
    from cuda_agent.reward_fns.cuda_kernel import compute_score as raw

    answer = "```python model_new.py\nimport cuda_extension\n```\n"
    result = await raw("s", answer, "t1", dict(EXTRA_INFO), pool_address=str(tmp_path / "no-pool.sock"))
    assert result["infra_failure"] is True and result["status"] == "infra_error"
    assert result["score"] == 0.0 and result["kernel_reward"] is None
    assert "Pool" in result["error"]


async def test_the_window_check_option_reaches_the_embedded_pool():
    """Issue 46: reward_kwargs.window_check=true gives the embedded pool's evaluators the window check."""
    from cuda_agent.reward_fns import evaluation

    options = RewardOptions.model_validate({"window_check": True})
    checked = await evaluation._EMBEDDED.get("cpu", None, options.window_check)
    plain = await evaluation._EMBEDDED.get("cpu", None)
    try:
        assert checked is not plain
        assert checked.config.window_check and not plain.config.window_check
        assert all(worker.evaluator.config.window_check for worker in checked.workers)
    finally:
        await evaluation.aclose_embedded()
