#!/usr/bin/env bash
# Stage 1 of the CUDA Agent recipe: single-turn PPO warm-up of the base model (actor and critic).
#
#   MODEL_PATH=/models/base TRAIN_FILES=/data/ops_single_turn.parquet VAL_FILES=/data/kb_single_turn.parquet \
#     bash recipe/cuda_agent/run_single_turn_ppo.sh [hydra overrides...]
#
# Environment: MODEL_PATH, TRAIN_FILES (required); VAL_FILES (default TRAIN_FILES); NNODES (1),
# GPUS_PER_NODE (8); CUDA_AGENT_POOL: the evaluation pool (`cuda-agent pool serve` prints it;
# without it every reward worker starts its own embedded pool); DRY_RUN=1 prints the composed
# config and exits. Extra arguments are Hydra overrides, e.g. trainer.total_epochs=1.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${MODEL_PATH:?set MODEL_PATH to the base model}"
: "${TRAIN_FILES:?set TRAIN_FILES to the single-turn training parquet}"
VAL_FILES="${VAL_FILES:-$TRAIN_FILES}"

args=(
  --config-path="$REPO/recipe/cuda_agent/config" --config-name=cuda_agent_single_turn_ppo
  actor_rollout_ref.model.path="$MODEL_PATH"
  data.train_files="$TRAIN_FILES" data.val_files="$VAL_FILES"
  reward.custom_reward_function.path="$REPO/reward_fns/cuda_kernel.py"
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$REPO/recipe/cuda_agent/config/agent_loops.yaml"
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
