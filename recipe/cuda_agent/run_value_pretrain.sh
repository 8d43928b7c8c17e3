#!/usr/bin/env bash
# Stage 3 of the CUDA Agent recipe: value pre-training of the critic on the collected trajectories
# (GAE targets with gamma 1, lambda 0.95 from its own values, veRL's GAE and value loss; the paper,
# section 3). Writes a Hugging Face AutoModelForTokenClassification (num_labels=1) folder that
# stage 4 loads as critic.model.path.
#
#   MODEL_PATH=/ckpt/rft_hf TRAJECTORIES=/data/trajectories OUT_DIR=/ckpt/critic \
#     bash recipe/cuda_agent/run_value_pretrain.sh [cuda-agent value pretrain options...]
#
# Environment: MODEL_PATH (the critic's start: the RFT or stage-1 model), TRAJECTORIES (files or
# folders, space-separated), OUT_DIR (required; must not exist); STEPS (200), DEVICE (cuda);
# DRY_RUN=1 prints the command and exits. Extra arguments are options of `cuda-agent value
# pretrain` (--lr, --batch-size, --max-length, --gradient-checkpointing, ...).
set -euo pipefail

: "${MODEL_PATH:?set MODEL_PATH to the model the critic starts from}"
: "${TRAJECTORIES:?set TRAJECTORIES to the trajectory records (files or folders)}"
: "${OUT_DIR:?set OUT_DIR to the critic checkpoint folder to write}"
read -r -a trajectories <<< "$TRAJECTORIES"

cmd=(python3 -P -m cuda_agent.cli.main value pretrain "${trajectories[@]}" --model "$MODEL_PATH" --out "$OUT_DIR"
     --steps "${STEPS:-200}" --device "${DEVICE:-cuda}" "$@")
if [[ "${DRY_RUN:-0}" == "1" ]]; then
  printf '%q ' "${cmd[@]}"; echo
  exit 0
fi
exec "${cmd[@]}"
