#!/usr/bin/env bash
# Stage 2 of the CUDA Agent recipe: RFT, supervised fine-tuning of the stage-1 model on the filtered
# trajectories (`cuda-agent rft filter TRAJECTORIES... --out sft.parquet`), loss on the assistant's
# tokens only, 128k context through veRL's Ulysses sequence parallelism.
#
#   MODEL_PATH=/ckpt/stage1_hf SFT_FILES=/data/sft.parquet OUT_DIR=/ckpt/rft \
#     bash recipe/cuda_agent/run_rft.sh [hydra overrides...]
#
# Environment: MODEL_PATH (the merged stage-1 model), SFT_FILES (required); OUT_DIR (checkpoints/rft:
# global_step_N/huggingface is the Hugging Face result); NNODES (1), GPUS_PER_NODE (8), SP_SIZE
# (sequence-parallel GPUs per sequence, default GPUS_PER_NODE); DRY_RUN=1 prints the command on
# stderr and the composed config on stdout, and exits. Extra arguments are Hydra overrides.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${MODEL_PATH:?set MODEL_PATH to the merged stage-1 model (Hugging Face folder)}"
: "${SFT_FILES:?set SFT_FILES to the output of cuda-agent rft filter}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"

args=(
  --config-path="$REPO/recipe/cuda_agent/config" --config-name=cuda_agent_rft_sft
  model.path="$MODEL_PATH"
  data.train_files="$SFT_FILES"
  trainer.default_local_dir="${OUT_DIR:-checkpoints/rft}"
  trainer.nnodes="${NNODES:-1}" trainer.n_gpus_per_node="$GPUS_PER_NODE"
  engine.ulysses_sequence_parallel_size="${SP_SIZE:-$GPUS_PER_NODE}"
)
launcher=(torchrun --nnodes="${NNODES:-1}" --nproc_per_node="$GPUS_PER_NODE" -m verl.trainer.sft_trainer)
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  printf '%q ' "${launcher[@]}" "${args[@]}" "$@" >&2; echo >&2
  exec python3 -m verl.trainer.sft_trainer "${args[@]}" "$@" --cfg job --resolve
fi
exec "${launcher[@]}" "${args[@]}" "$@"
