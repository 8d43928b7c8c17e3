"""One whole ``verl.trainer.main_ppo`` step on CPU: stage 1's script and config, our loop, reward and rollout.

``recipe/cuda_agent/run_cpu_ppo_step.sh`` as a user runs it (stage 1's ``run_single_turn_ppo.sh`` with
the CPU overrides of docs/training.md, "A PPO step on CPU"): veRL 0.9.1 unmodified (its v1 trainer, FSDP2 actor over gloo
through our ``VERL_PLATFORM=cpu`` platform, TransferQueue, real Ray), ``rollout.name=hf`` serving
SmolLM2-135M-Instruct's real weights, the ``cuda_agent_single_turn`` loop scoring each answer with
the embedded CPU evaluator, and stage 1's own estimator: GAE with an FSDP2 critic (loaded with sdpa
through ``critic_attention``; veRL 0.9.1 alone asks for flash-attn). The answers are prose, so every
reward is -1; the critic's values make the advantages non-zero, so the actor gets a gradient, and the
step's update and the weight sync after it are seen to move the served weights.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_agent.recipe.ppo_log import step_metrics, weight_syncs

pytestmark = [pytest.mark.verl, pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]

@pytest.fixture(scope="module")
def ppo_run(smollm2_dir, tmp_path_factory):
    import pandas as pd

    folder = tmp_path_factory.mktemp("ppo_cpu")
    rows = pd.read_parquet(REPO / "examples" / "data" / "single_turn.parquet")
    pd.concat([rows, rows]).to_parquet(folder / "train.parquet")
    env = {**os.environ, "MODEL_PATH": str(smollm2_dir), "TRAIN_FILES": str(folder / "train.parquet"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    completed = subprocess.run(
        ["bash", str(REPO / "recipe" / "cuda_agent" / "run_cpu_ppo_step.sh"), f"trainer.default_local_dir={folder / 'ckpt'}"],
        capture_output=True, text=True, timeout=1100, env=env, cwd=folder,
    )
    log = completed.stdout + completed.stderr
    (folder / "main_ppo.log").write_text(log)
    assert completed.returncode == 0, log[-6000:]
    return log


def test_the_step_generates_scores_updates_and_syncs(ppo_run):
    metrics = step_metrics(ppo_run)[1]
    for key in ("actor/pg_loss", "actor/entropy", "critic/score/mean", "timing_s/gen", "timing_s/update_actor",
                "timing_s/update_weights", "response_length/mean", "perf/throughput", "critic/vf_loss",
                "critic/values/mean", "timing_s/update_critic"):
        assert math.isfinite(metrics[key]), key
    assert metrics["actor/grad_norm"] > 0  # GAE's advantages: a real backward pass and optimizer step
    assert metrics["critic/grad_norm"] > 0  # the critic trains too
    assert 0 < metrics["response_length/mean"] <= 32
    assert metrics["critic/score/mean"] == -1.0  # prose answers, scored by the evaluator's static check
    assert "LLMServerManager: ['" in ppo_run and ":hf-0']" in ppo_run


def test_rollout_log_probs_reach_rollout_correction(ppo_run):
    """The engine's log-probs (fp32 here) against the actor's recomputation (bf16 mixed precision)."""
    metrics = step_metrics(ppo_run)[1]
    assert metrics["training/rollout_probs_diff_valid"] == 1.0
    assert 0 <= metrics["rollout_corr/k3_kl"] < 0.01
    assert metrics["training/rollout_actor_probs_pearson_corr"] > 0.99


def test_the_weights_move_into_the_server(ppo_run):
    """The adapter prints each sync: at start-up (step 0) and after the update (step 1); the served
    tensors' hashes equal the actor's (checked by the adapter) and change with the update."""
    syncs = weight_syncs(ppo_run)
    assert [sync["step"] for sync in syncs] == ["0", "1"]
    assert syncs[0]["digests"] != syncs[1]["digests"]
