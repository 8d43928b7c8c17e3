"""Stages 2-4 configs compose on veRL 0.9.1's own schemas; the stage scripts and the pipeline (DRY_RUN)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
import yaml
from omegaconf import OmegaConf

pytestmark = pytest.mark.verl

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipe" / "cuda_agent"
CONFIG_DIR = RECIPE / "config"
BIN = Path(sys.executable).parent


def _compose(name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        config = compose(config_name=name, overrides=overrides)
    OmegaConf.resolve(config)
    return config


def test_rft_config_builds_veRL_sft_dataclasses():
    from verl.utils.config import omega_conf_to_dataclass

    config = _compose("cuda_agent_rft_sft", ["model.path=/models/stage1", "data.train_files=/d/sft.parquet"])
    engine = omega_conf_to_dataclass(config.engine)
    omega_conf_to_dataclass(config.optim)
    checkpoint = omega_conf_to_dataclass(config.checkpoint)
    assert engine.ulysses_sequence_parallel_size == 8
    assert (config.data.messages_key, config.data.tools_key) == ("messages", "tools")
    assert config.data.max_length == 131072 and config.data.truncation == "error"
    assert "hf_model" in checkpoint.save_contents


def test_agentic_config_corrects_the_mismatch_with_the_engines_logprobs():
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    config = _compose(
        "cuda_agent_agentic_ppo",
        ["actor_rollout_ref.model.path=/m", "data.train_files=/d.parquet", "data.val_files=/d.parquet"],
    )
    correction = RolloutCorrectionConfig(**config.algorithm.rollout_correction)
    assert (correction.rollout_is, correction.rollout_is_threshold) == ("token", 2.0)
    assert (correction.rollout_rs, correction.rollout_rs_threshold) == ("seq_mean_k3", 0.01)
    assert correction.bypass_mode is False
    assert config.actor_rollout_ref.rollout.calculate_log_probs is True
    assert config.trainer.use_v1 is True  # veRL 0.9.1's default trainer


def _script(name: str, env: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, **env, "DRY_RUN": "1", "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(["bash", str(RECIPE / name), *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=environment)


def test_run_rft_prints_torchrun_and_composes(tmp_path):
    result = _script("run_rft.sh", {"MODEL_PATH": "/ckpt/stage1_hf", "SFT_FILES": "/d/sft.parquet",
                                    "GPUS_PER_NODE": "4"}, "trainer.total_epochs=1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    command = [line for line in result.stderr.splitlines() if line.startswith("torchrun")][0]
    assert "--nproc_per_node=4 -m verl.trainer.sft_trainer" in command
    job = OmegaConf.create(result.stdout)
    assert job.model.path == "/ckpt/stage1_hf" and job.trainer.total_epochs == 1
    assert job.engine.ulysses_sequence_parallel_size == 4


def test_run_value_pretrain_prints_its_command(tmp_path):
    result = _script("run_value_pretrain.sh", {"MODEL_PATH": "/ckpt/rft_hf", "TRAJECTORIES": "/t/a /t/b",
                                               "OUT_DIR": "/ckpt/critic"}, "--lr", "2e-6", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["python3", "-P", "-m", "cuda_agent.cli.main", "value", "pretrain", "/t/a", "/t/b",
                                     "--model", "/ckpt/rft_hf", "--out", "/ckpt/critic", "--steps", "200",
                                     "--device", "cuda", "--lr", "2e-6"]


PIPELINE_ENV = {"BASE_MODEL": "/models/base", "SINGLE_TURN_FILES": "/d/single.parquet",
                "AGENTIC_FILES": "/d/agentic.parquet"}


def test_pipeline_dry_run_prints_every_stage_chained(tmp_path):
    work = tmp_path / "work"
    result = _script("run_pipeline.sh", {**PIPELINE_ENV, "WORK_DIR": str(work)}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 11
    single_baselines, agentic_baselines, stage1, merge, loops, collect, rft_filter, rft, link, value, stage4 = lines
    # every task's baselines measured ahead, once per dataset (COLLECT_FILES defaults to the agentic set)
    assert single_baselines.split() == ["env", "python3", "-P", "-m", "cuda_agent.cli.main", "baselines", "--dataset",
                                        "/d/single.parquet", "--device", "cuda", "--jobs", "14", "--out",
                                        f"{work}/baselines/single.jsonl"]
    assert f"baselines --dataset /d/agentic.parquet --device cuda --jobs 14 --out {work}/baselines/agentic.jsonl" in agentic_baselines
    assert "run_single_turn_ppo.sh" in stage1 and f"trainer.default_local_dir={work}/stage1" in stage1
    assert f"--local_dir {work}/stage1/global_step_LAST/actor --target_dir {work}/stage1_hf.partial" in merge
    assert f"ACTOR_PATH={work}/stage1_hf" in collect and "trainer.val_only=true" in collect
    assert f"agent_loop_config_path={work}/collect_agent_loops.yaml" in collect
    assert f"rft filter {work}/trajectories --out {work}/sft.partial.parquet" in rft_filter
    assert f"MODEL_PATH={work}/stage1_hf SFT_FILES={work}/sft.parquet" in rft
    assert f"MODEL_PATH={work}/rft_hf TRAJECTORIES={work}/trajectories OUT_DIR={work}/critic.partial" in value
    assert f"ACTOR_PATH={work}/rft_hf CRITIC_PATH={work}/critic" in stage4
    assert not work.exists()  # a dry run writes nothing


def test_pipeline_writes_demonstrations_beside_the_collected_trajectories(tmp_path):
    """Issue 44: with DEMONSTRATIONS, known solutions are written through the tools after the collection and
    before the filter, their records in the trajectories folder the filter and the value pre-training read."""
    work = tmp_path / "work"
    env = {**PIPELINE_ENV, "WORK_DIR": str(work), "DEMONSTRATIONS": "/d/solutions"}
    lines = _script("run_pipeline.sh", env, cwd=tmp_path).stdout.strip().splitlines()
    assert len(lines) == 12
    demonstrate = lines[6]
    assert demonstrate.split() == ["python3", "-P", "-m", "cuda_agent.cli.main", "run", "--dataset", "/d/agentic.parquet",
                                   "--solutions", "/d/solutions", "--demonstrate", "--records", f"{work}/trajectories",
                                   "--out", f"{work}/demonstrations.jsonl"]
    assert "collect_agent_loops.yaml" in lines[5] and "rft filter" in lines[7]


def test_pipeline_measures_baselines_into_the_pools_cache(tmp_path):
    env = {**PIPELINE_ENV, "WORK_DIR": str(tmp_path / "work"), "STAGES": "baselines", "BASELINE_CACHE": "/pool/cache",
           "BASELINE_JOBS": "6", "COLLECT_FILES": "/d/collect.parquet"}
    lines = _script("run_pipeline.sh", env, cwd=tmp_path).stdout.strip().splitlines()
    assert [line.split("--dataset ")[1].split()[0] for line in lines] == [
        "/d/single.parquet", "/d/agentic.parquet", "/d/collect.parquet"]
    assert all(line.startswith("env CUDA_AGENT_CACHE=/pool/cache python3 -P -m cuda_agent.cli.main baselines")
               and "--jobs 6" in line for line in lines)


def test_a_failed_stage_stops_the_pipeline(tmp_path):
    """Really run (no DRY_RUN): the baselines stage fails (no GPU here; elsewhere the dataset does not exist),
    so stage 1 must not start."""
    env = {**os.environ, **PIPELINE_ENV, "SINGLE_TURN_FILES": str(tmp_path / "missing.parquet"), "WORK_DIR": str(tmp_path / "work"),
           "STAGES": "baselines stage1", "DRY_RUN": "0", "PATH": f"{BIN}:{os.environ['PATH']}"}
    result = subprocess.run(["bash", str(RECIPE / "run_pipeline.sh")], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path, env=env)
    assert result.returncode != 0
    assert "[pipeline] baselines (missing)" in result.stderr and "cuda-agent: error:" in result.stderr
    assert "[pipeline] stage1" not in result.stderr and "done: actor" not in result.stderr
    assert not (tmp_path / "work" / "baselines" / "missing.done").exists()


def test_pipeline_skips_stages_whose_output_exists(tmp_path):
    work = tmp_path / "work"
    (work / "stage1").mkdir(parents=True)
    (work / "stage1" / ".stage_done").touch()
    (work / "stage1" / "latest_checkpointed_iteration.txt").write_text("40")
    (work / "stage1_hf").mkdir()
    result = _script("run_pipeline.sh", {**PIPELINE_ENV, "WORK_DIR": str(work)}, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "stage1: skipped" in result.stderr and "merge: skipped" in result.stderr
    assert "run_single_turn_ppo.sh" not in result.stdout
    assert "model_merger" not in result.stdout


def test_collection_loop_file_sets_trajectory_dir(tmp_path):
    """The loop file the pipeline writes for collection is valid for the loop and names trajectory_dir."""
    import yaml

    from cuda_agent.recipe.loop_config import loop_config_from_kwargs

    result = _script("run_pipeline.sh", {**PIPELINE_ENV, "WORK_DIR": str(tmp_path), "STAGES": "collect"}, cwd=tmp_path)
    writer = result.stdout.splitlines()[0]
    env = {**os.environ, "DRY_RUN": "0", "PATH": f"{BIN}:{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", writer], check=True, env=env, timeout=60)
    entries = {e["name"]: e for e in yaml.safe_load((tmp_path / "collect_agent_loops.yaml").read_text())}
    options = loop_config_from_kwargs({k: v for k, v in entries["cuda_agent"].items() if k != "_target_"})
    assert options.trajectory_dir == str(tmp_path / "trajectories")


def test_the_one_gpu_pipeline_hands_its_toy_scale_to_every_stage(tmp_path):
    """Issue 44: run_pipeline_one_gpu.sh (here DEVICE=cpu, DRY_RUN) writes the data, the demonstrations' folder
    and a short-episode loop registry, and passes each stage its small settings, the caller's overrides last."""
    work = tmp_path / "work"
    env = {"BASE_MODEL": "/models/smol", "WORK_DIR": str(work), "DEVICE": "cpu", "MAX_TURNS_4": "2",
           "STAGE4_ARGS": "trainer.total_training_steps=7"}
    result = _script("run_pipeline_one_gpu.sh", env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    stage1 = next(line for line in lines if "run_single_turn_ppo.sh" in line)
    assert "MODEL_PATH=/models/smol" in stage1 and f"TRAIN_FILES={work}/data/single_turn.parquet" in stage1
    for setting in ("actor_rollout_ref.rollout.name=hf", "trainer.device=cpu", "data.train_batch_size=1",
                    "trainer.total_training_steps=1", "data.max_response_length=256"):
        assert setting in stage1.split()
    stage4 = next(line for line in lines if "run_agentic_ppo.sh" in line and "val_only" not in line).split()
    assert stage4[-1] == "trainer.total_training_steps=7", "the caller's override comes last, so it wins"
    assert f"actor_rollout_ref.rollout.agent.agent_loop_config_path={work}/agent_loops_short.yaml" in stage4
    loops = {loop["name"]: loop for loop in yaml.safe_load((work / "agent_loops_short.yaml").read_text())}
    assert loops["cuda_agent"]["limits"]["max_turns"] == 2
    demonstrate = next(line for line in lines if "--demonstrate" in line)
    assert f"--solutions {work}/solutions" in demonstrate
    assert (work / "solutions" / "examples" / "diag_matmul" / "model_new.py").is_file()
    value = next(line for line in lines if "value_pretrain.sh" in line)
    assert "STEPS=2" in value.split() and f"OUT_DIR={work}/critic.partial" in value.split()
    assert not any("run_rft.sh" in line for line in lines) and "rft: not on CPU" in result.stderr
    assert "--device cpu" in lines[0]  # the baselines, measured on the device the tasks name
