#!/usr/bin/env bash
# Stage 1 and stage 4 of the recipe, 2 PPO steps each, on ONE GPU (issue 43): the recipe's own scripts
# (run_single_turn_ppo.sh, run_agentic_ppo.sh) with rollout.name=hf, actor and critic (GAE) under FSDP,
# and the evaluation pool served on the same GPU (`cuda-agent pool serve`). Tiny data: the example
# problems as veRL rows (examples/data/make_example_parquet.py --device cuda).
#
#   MODEL_PATH=/models/SmolLM2-135M-Instruct OUT=results/ppo_gpu bash benchmarks/training/ppo_one_gpu.sh
#
# Environment: MODEL_PATH (required: a Hugging Face causal LM folder); OUT (where logs go; default a temp
# folder); STAGES ("1 4"); STEPS (2); STAGE_TIMEOUT (seconds per stage, 420); RESPONSE_1 (256: stage 1's
# response tokens); RESPONSE_4 (1024: stage 4's whole trajectory after the prompt); MAX_TURNS_4 (3);
# ATTENTION (sdpa: the actor's and critic's attention; flash_attention_2 where flash-attn is installed).
# Writes $OUT/stage{1,4}.log, $OUT/pool_status_{before,after}_{1,4}.json (the served pool's counters around
# each stage) and $OUT/ppo_summary.json
# (benchmarks/training/ppo_summary.py: each step's metrics, weight syncs, the pool's evaluations, checks).
set -uo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
: "${MODEL_PATH:?set MODEL_PATH to a Hugging Face causal LM folder}"
OUT="${OUT:-$(mktemp -d)}"; mkdir -p "$OUT"
STAGES="${STAGES:-1 4}" STEPS="${STEPS:-2}" ATTENTION="${ATTENTION:-sdpa}"
WORK="$(mktemp -d)"; t0=$(date +%s)
stamp() { echo "[ppo_one_gpu +$(( $(date +%s) - t0 ))s] $*"; }
cuda_agent() { python3 -P -m cuda_agent.cli.main "$@"; }
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-cuda_agent.recipe.plugin}"
export RAY_ENABLE_UV_RUN_RUNTIME_ENV="${RAY_ENABLE_UV_RUN_RUNTIME_ENV:-0}" GPUS_PER_NODE=1

stamp "data: example problems as veRL rows (cuda)"
python3 -P "$REPO/examples/data/make_example_parquet.py" --device cuda --out "$WORK/data" || exit 1

stamp "pool: cuda-agent pool serve on GPU 0"
SOCKET="$WORK/pool.sock"
cuda_agent pool serve --device cuda --devices 0 --socket "$SOCKET" >"$OUT/pool.log" 2>&1 &
POOL_PID=$!
trap 'kill $POOL_PID 2>/dev/null; wait $POOL_PID 2>/dev/null' EXIT
for _ in $(seq 120); do
  cuda_agent pool status --address "$SOCKET" --json >/dev/null 2>&1 && break
  kill -0 $POOL_PID 2>/dev/null || { echo "pool died:"; tail -20 "$OUT/pool.log"; exit 1; }
  sleep 1
done
export CUDA_AGENT_POOL="$SOCKET"

# what both stages share: one GPU, small batches, the transformers rollout server, sdpa attention
common=(
  actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.tensor_model_parallel_size=1
  trainer.total_training_steps="$STEPS" trainer.total_epochs=100 trainer.val_before_train=false
  trainer.test_freq=-1 trainer.save_freq=-1 trainer.resume_mode=disable 'trainer.logger=[console]'
  data.train_batch_size=2 data.dataloader_num_workers=0 actor_rollout_ref.rollout.n=1
  actor_rollout_ref.actor.ppo_mini_batch_size=2
  actor_rollout_ref.model.use_remove_padding=false critic.model.use_remove_padding=false
  "+actor_rollout_ref.model.override_config.attn_implementation=$ATTENTION"
  "+critic.model.override_config.attn_implementation=$ATTENTION"
  actor_rollout_ref.rollout.agent.num_workers=1 transfer_queue.backend.SimpleStorage.num_data_storage_units=1
  ray_kwargs.ray_init.num_cpus="$(nproc)" +ray_kwargs.ray_init.include_dashboard=false
)

run_stage() {  # $1: stage number; the rest: the stage's command
  local stage=$1; shift
  stamp "stage $stage: ${STEPS} steps"
  cuda_agent pool status --address "$SOCKET" --json >"$OUT/pool_status_before_$stage.json" 2>/dev/null
  (cd "$WORK" && CUDA_VISIBLE_DEVICES=0 timeout "${STAGE_TIMEOUT:-420}" "$@" "${common[@]}" \
     trainer.default_local_dir="$WORK/ckpt$stage") >"$OUT/stage$stage.log" 2>&1
  echo "rc=$?" >>"$OUT/stage$stage.log"
  cuda_agent pool status --address "$SOCKET" --json >"$OUT/pool_status_after_$stage.json" 2>/dev/null
  stamp "stage $stage: $(tail -1 "$OUT/stage$stage.log")"
}

if [[ " $STAGES " == *" 1 "* ]]; then
  prompt=2048 response="${RESPONSE_1:-256}"
  MODEL_PATH="$MODEL_PATH" TRAIN_FILES="$WORK/data/single_turn.parquet" \
  run_stage 1 bash "$REPO/recipe/cuda_agent/run_single_turn_ppo.sh" \
    data.max_prompt_length=$prompt data.max_response_length="$response" \
    actor_rollout_ref.rollout.max_model_len=$((prompt + response)) \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((2 * (prompt + response))) \
    critic.ppo_max_token_len_per_gpu=$((2 * (prompt + response)))
fi

if [[ " $STAGES " == *" 4 "* ]]; then
  prompt=6144 response="${RESPONSE_4:-1024}"
  # the recipe's loop registry with a short episode: MAX_TURNS_4 turns, the context this run gives
  python3 -P - "$REPO/recipe/cuda_agent/config/agent_loops.yaml" "$WORK/agent_loops.yaml" \
    "${MAX_TURNS_4:-3}" $((prompt + response)) <<'PY' || exit 1
import sys, yaml
loops = yaml.safe_load(open(sys.argv[1]))
for loop in loops:
    if "limits" in loop:
        loop["limits"].update(max_turns=int(sys.argv[3]), max_total_tokens=int(sys.argv[4]))
yaml.safe_dump(loops, open(sys.argv[2], "w"), sort_keys=False)
PY
  ACTOR_PATH="$MODEL_PATH" TRAIN_FILES="$WORK/data/agentic.parquet" \
  run_stage 4 bash "$REPO/recipe/cuda_agent/run_agentic_ppo.sh" \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$WORK/agent_loops.yaml" \
    data.max_prompt_length=$prompt data.max_response_length="$response" \
    actor_rollout_ref.rollout.max_model_len=$((prompt + response)) \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((2 * (prompt + response))) \
    critic.ppo_max_token_len_per_gpu=$((2 * (prompt + response)))
fi

python3 -P "$REPO/benchmarks/training/ppo_summary.py" "$OUT" --steps "$STEPS" >"$OUT/ppo_summary.txt"
cat "$OUT/ppo_summary.txt"
