"""The recipe's configs compose on veRL 0.9.1's own ppo_trainer and pass veRL's own validation."""

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "recipe" / "cuda_agent" / "config"
CONFIGS = ["cuda_agent_single_turn_ppo", "cuda_agent_agentic_ppo"]
REQUIRED = [
    "actor_rollout_ref.model.path=/models/base",
    "data.train_files=/d/train.parquet",
    "data.val_files=/d/val.parquet",
]


def composed(name: str, overrides: list[str] = ()):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=name, overrides=[*REQUIRED, *overrides])


# veRL 0.9.1's default (v1) trainer and worker, and the legacy v0 one (main_ppo picks by trainer.use_v1)
USE_V1 = ["trainer.use_v1=true", "trainer.use_v1=false"]


@pytest.mark.parametrize("use_v1", USE_V1)
@pytest.mark.parametrize("name", CONFIGS)
def test_composes_and_passes_veRL_validation(name, use_v1, tiny_model_dir):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config = composed(name, [f"actor_rollout_ref.model.path={tiny_model_dir}", use_v1])
    OmegaConf.resolve(config)
    assert config.trainer.use_v1 is (use_v1 == "trainer.use_v1=true")
    assert need_critic(config) and not need_reference_policy(config)
    validate_config(config, use_reference_policy=False, use_critic=True)
    # the dataclass configs veRL's workers build from these sections
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(config.algorithm)
    # (config.reward is read as a DictConfig by veRL: its RewardManagerConfig cannot be built from yaml
    # in 0.9.1, its __post_init__ calls a missing super().__post_init__)
    omega_conf_to_dataclass(config.critic)


@pytest.mark.parametrize("name", CONFIGS)
def test_recipe_values(name):
    config = composed(name)
    actor, critic, algo = config.actor_rollout_ref.actor, config.critic, config.algorithm
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    assert actor.optim.lr == 3e-6 and critic.optim.lr == 6e-6
    assert (algo.adv_estimator, algo.gamma, algo.lam) == ("gae", 1.0, 0.95)
    reward = config.reward.custom_reward_function
    assert reward.path.endswith("reward_fns/cuda_kernel.py") and reward.name == "compute_score"
    assert "custom_reward_function" not in config or all(v is None for v in config.custom_reward_function.values())
    context = config.data.max_prompt_length + config.data.max_response_length
    assert context == (131072 if "agentic" in name else 32768)
    assert config.actor_rollout_ref.rollout.max_model_len == context


@pytest.mark.parametrize("use_v1", USE_V1)
def test_agentic_config_with_our_group_estimator_passes_veRL_validation(use_v1, tiny_model_dir):
    """The documented critic-free variant: cuda_agent_grpo with rollout.n > 1."""
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.utils import need_critic
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from cuda_agent.recipe.advantage import ESTIMATOR_NAME, compute_valid_group_advantage

    config = composed("cuda_agent_agentic_ppo", [f"actor_rollout_ref.model.path={tiny_model_dir}", use_v1,
                                                 f"algorithm.adv_estimator={ESTIMATOR_NAME}",
                                                 "actor_rollout_ref.rollout.n=8"])
    OmegaConf.resolve(config)
    assert not need_critic(config)
    validate_config(config, use_reference_policy=False, use_critic=False)
    assert isinstance(omega_conf_to_dataclass(config.algorithm), AlgoConfig)
    assert get_adv_estimator_fn(config.algorithm.adv_estimator) is compute_valid_group_advantage


def test_agentic_loop_config_is_valid_and_limits_match():
    from cuda_agent.recipe.loop_config import loop_config_from_kwargs

    loaded = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "agent_loops.yaml"))
    entries = {entry["name"]: entry for entry in loaded}
    assert set(entries) == {"cuda_agent", "cuda_agent_eval", "cuda_agent_single_turn"}
    train = loop_config_from_kwargs({k: v for k, v in entries["cuda_agent"].items() if k != "_target_"})
    evaluation = loop_config_from_kwargs({k: v for k, v in entries["cuda_agent_eval"].items() if k != "_target_"})
    assert (train.limits.max_turns, evaluation.limits.max_turns) == (150, 200)
    assert train.limits.max_total_tokens == 131072


@pytest.mark.parametrize("use_v1", USE_V1)
@pytest.mark.parametrize("name", CONFIGS)
def test_main_ppo_command_line_composes_it(name, use_v1):
    """The exact entry point of the stage scripts, stopped after composition (--cfg job)."""
    completed = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", f"--config-path={CONFIG_DIR}", f"--config-name={name}",
         *REQUIRED, use_v1, "--cfg", "job", "--resolve"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    job = OmegaConf.create(completed.stdout)
    assert job.reward.custom_reward_function.name == "compute_score"
    assert job.actor_rollout_ref.rollout.agent.default_agent_loop in ("cuda_agent", "cuda_agent_single_turn")
    assert job.trainer.use_v1 is (use_v1 == "trainer.use_v1=true")


@pytest.mark.parametrize(
    ("script", "env"),
    [
        ("run_single_turn_ppo.sh", {"MODEL_PATH": "/models/base"}),
        ("run_agentic_ppo.sh", {"ACTOR_PATH": "/ckpt/rft", "CRITIC_PATH": "/ckpt/value", "TOOL_FORMAT": "qwen3_coder"}),
    ],
)
def test_stage_scripts_compose_with_absolute_paths(script, env, tmp_path):
    import os

    bin_dir = Path(sys.executable).parent  # the scripts call python3 from PATH: this venv's
    environment = {**os.environ, **env, "TRAIN_FILES": "/d/train.parquet", "DRY_RUN": "1",
                   "CUDA_AGENT_POOL": "/run/cuda_agent/pool.sock", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    completed = subprocess.run(
        ["bash", str(CONFIG_DIR.parent / script), "trainer.total_epochs=1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=environment,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    job = OmegaConf.create(completed.stdout)
    assert Path(job.reward.custom_reward_function.path).is_file()
    assert Path(job.actor_rollout_ref.rollout.agent.agent_loop_config_path).is_file()
    assert job.reward.custom_reward_function.reward_kwargs.pool_address == "/run/cuda_agent/pool.sock"
    assert job.trainer.total_epochs == 1
    if "agentic" in script:
        assert job.critic.model.path == "/ckpt/value"
        assert job.actor_rollout_ref.rollout.multi_turn.format == "qwen3_coder"
