#!/usr/bin/env bash
# One PPO step of stage 1 on a CPU-only machine: the recipe's smoke test (docs/training.md, "A PPO step on CPU").
#
#   MODEL_PATH=/models/SmolLM2-135M-Instruct TRAIN_FILES=train.parquet bash recipe/cuda_agent/run_cpu_ppo_step.sh [overrides...]
#
# Runs run_single_turn_ppo.sh (veRL's main_ppo, unmodified) with rollout.name=hf (the transformers
# rollout server), VERL_PLATFORM=cpu (our gloo platform), FSDP2 actor and critic (stage 1's GAE; the critic
# loads with sdpa through recipe/cuda_agent/critic_attention.py), the embedded CPU evaluator. Needs >= 2 rows
# in TRAIN_FILES and ~13 GB of memory for a 135M model. Extra arguments are Hydra overrides (they win).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${MODEL_PATH:?set MODEL_PATH to a small Hugging Face causal LM folder}"
: "${TRAIN_FILES:?set TRAIN_FILES to a single-turn parquet (>= 2 rows)}"
export VERL_PLATFORM=cpu RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1 GPUS_PER_NODE=1
export RAY_ENABLE_UV_RUN_RUNTIME_ENV="${RAY_ENABLE_UV_RUN_RUNTIME_ENV:-0}"
PROMPT="${PROMPT_LENGTH:-1024}" RESPONSE="${RESPONSE_LENGTH:-32}"
exec bash "$REPO/recipe/cuda_agent/run_single_turn_ppo.sh" \
  actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.dtype=float32 actor_rollout_ref.rollout.calculate_log_probs=true \
  actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.ref.strategy=fsdp2 critic.strategy=fsdp2 \
  trainer.device=cpu trainer.total_training_steps="${STEPS:-1}" trainer.total_epochs=1 \
  trainer.val_before_train=false trainer.test_freq=-1 trainer.save_freq=-1 trainer.resume_mode=disable \
  'trainer.logger=[console]' \
  data.train_batch_size=2 data.max_prompt_length="$PROMPT" data.max_response_length="$RESPONSE" \
  data.dataloader_num_workers=0 actor_rollout_ref.rollout.max_model_len=$((PROMPT + RESPONSE)) \
  actor_rollout_ref.actor.ppo_mini_batch_size=2 \
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((2 * (PROMPT + RESPONSE))) \
  critic.ppo_max_token_len_per_gpu=$((2 * (PROMPT + RESPONSE))) \
  actor_rollout_ref.model.use_remove_padding=false critic.model.use_remove_padding=false \
  +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
  +critic.model.override_config.attn_implementation=sdpa \
  actor_rollout_ref.rollout.agent.num_workers=1 transfer_queue.backend.SimpleStorage.num_data_storage_units=1 \
  ray_kwargs.ray_init.num_cpus=12 +ray_kwargs.ray_init.num_gpus=1 +ray_kwargs.ray_init.include_dashboard=false \
  "$@"
