#!/usr/bin/env bash
# Stage 4 of the CUDA Agent recipe: agentic PPO (clip 0.2/0.28, 128k context, 150 turns, GAE 1/0.95).
# The actor starts from the RFT checkpoint (stage 2), the critic from value pre-training (stage 3).
#
#   ACTOR_PATH=/ckpt/rft CRITIC_PATH=/ckpt/value TRAIN_FILES=/data/ops_agentic.parquet \
#     bash recipe/cuda_agent/run_agentic_ppo.sh [hydra overrides...]
#
# Environment: ACTOR_PATH, TRAIN_FILES (required); CRITIC_PATH (default ACTOR_PATH); VAL_FILES
# (default TRAIN_FILES); TOOL_FORMAT (hermes; qwen3_coder for Qwen3-Coder templates); NNODES (1),
# GPUS_PER_NODE (8); CUDA_AGENT_POOL: the evaluation pool's unix socket (`cuda-agent pool serve`),
# also mounted into every sandbox for the skill scripts; DRY_RUN=1 prints the composed config
# and exits. Extra arguments are Hydra overrides.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${ACTOR_PATH:?set ACTOR_PATH to the RFT actor checkpoint}"
: "${TRAIN_FILES:?set TRAIN_FILES to the agentic training parquet}"
VAL_FILES="${VAL_FILES:-$TRAIN_FILES}"

args=(
  --config-path="$REPO/recipe/cuda_agent/config" --config-name=cuda_agent_agentic_ppo
  actor_rollout_ref.model.path="$ACTOR_PATH"
  critic.model.path="${CRITIC_PATH:-$ACTOR_PATH}"
  data.train_files="$TRAIN_FILES" data.val_files="$VAL_FILES"
  reward.custom_reward_function.path="$REPO/reward_fns/cuda_kernel.py"
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$REPO/recipe/cuda_agent/config/agent_loops.yaml"
  actor_rollout_ref.rollout.multi_turn.format="${TOOL_FORMAT:-hermes}"
  trainer.nnodes="${NNODES:-1}" trainer.n_gpus_per_node="${GPUS_PER_NODE:-8}"
)
if [[ -n "${CUDA_AGENT_POOL:-}" ]]; then
  args+=("+reward.custom_reward_function.reward_kwargs.pool_address=$CUDA_AGENT_POOL")
fi
dry_run=()
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  dry_run=(--cfg job --resolve)
fi
exec python3 -m verl.trainer.main_ppo "${args[@]}" "$@" "${dry_run[@]}"
