#!/usr/bin/env bash
# The whole training pipeline (run_pipeline.sh: baselines, stage 1, merge, collect, demonstrate, filter,
# RFT, value pre-training, stage 4) on ONE GPU at toy scale, to check every hand-off of the chain with a
# small model: batches of 2 (1 on CPU), PPO_STEPS steps a PPO stage, episodes of MAX_TURNS_4 turns, the
# transformers rollout server (rollout.name=hf), actor and critic under FSDP, the evaluation pool served on
# the same GPU (`cuda-agent pool serve`), the example problems as tasks and their known solutions as
# demonstrations (a 135M model rarely earns a positive reward; the RFT filter keeps only those).
#
#   BASE_MODEL=/models/SmolLM2-135M-Instruct WORK_DIR=/tmp/pipeline bash recipe/cuda_agent/run_pipeline_one_gpu.sh
#
# Resumable: run the same command again; every finished stage is skipped (run_pipeline.sh), an
# interrupted one starts again. Each stage's console output goes to WORK_DIR/logs/<stage>.log; this
# script prints one line per stage (started, finished in N s, skipped).
#
# Environment: BASE_MODEL, WORK_DIR (required); DEVICE (cuda; cpu runs the chain on this machine's CPU: veRL
# on the recipe's gloo platform, the embedded CPU evaluator, the one CPU-sized example problem, batches of 1,
# ~14 GB of memory for a 135M model; every stage but RFT, whose veRL trainer needs a GPU: value pre-training
# and stage 4 then read WORK_DIR/rft_hf, a model folder or link you put there); DATA (a folder with
# single_turn.parquet and agentic.parquet; default the example problems written for DEVICE into
# WORK_DIR/data); DEMONSTRATIONS (<task_id>/model_new.py + kernels/; default the example solutions for
# DEVICE, laid out by task id in WORK_DIR/solutions; "none": no demonstrate stage); PPO_STEPS (1: stage 1
# and stage 4), RFT_STEPS (1), VALUE_STEPS (2), COLLECT_SAMPLES (1 per task); RESPONSE_1 (256: stage 1's
# response tokens), RESPONSE_4 (1024: a whole trajectory after its prompt, collect and stage 4), MAX_TURNS_4
# (3); ATTENTION (sdpa); BASELINE_JOBS (4); STAGES, and the per-stage *_ARGS (they win over this script's),
# as run_pipeline.sh.
set -uo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; fi
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
: "${BASE_MODEL:?set BASE_MODEL to a small Hugging Face causal LM folder (e.g. SmolLM2-135M-Instruct)}"
: "${WORK_DIR:?set WORK_DIR to the folder every stage writes under (the same one to resume)}"
export DEVICE="${DEVICE:-cuda}"
[[ "$DEVICE" == cuda || "$DEVICE" == cpu ]] || { echo "DEVICE must be cuda or cpu, not '$DEVICE'" >&2; exit 2; }
mkdir -p "$WORK_DIR/logs"
WORK_DIR="$(cd "$WORK_DIR" && pwd)"
t0=$SECONDS
say() { echo "[one_gpu +$(( SECONDS - t0 ))s] $*" >&2; }
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-cuda_agent.recipe.plugin}"
export RAY_ENABLE_UV_RUN_RUNTIME_ENV="${RAY_ENABLE_UV_RUN_RUNTIME_ENV:-0}" GPUS_PER_NODE=1
# baselines, the pool and the embedded evaluator share one cache, kept with the work
export CUDA_AGENT_CACHE="${CUDA_AGENT_CACHE:-$WORK_DIR/cache}"

DATA="${DATA:-$WORK_DIR/data}"
if [[ ! -f "$DATA/single_turn.parquet" || ! -f "$DATA/agentic.parquet" ]]; then
  problems="$REPO/examples/problems"
  if [[ "$DEVICE" == cpu ]]; then  # the one example sized for a CPU (the others take minutes a baseline there)
    problems="$WORK_DIR/problems"; mkdir -p "$problems"; cp "$REPO/examples/problems/diag_matmul.py" "$problems/"
  fi
  say "data: the example problems as veRL rows ($DEVICE) -> $DATA"
  python3 -P "$REPO/examples/data/make_example_parquet.py" --device "$DEVICE" --problems "$problems" --out "$DATA" >&2 ||
    exit 1
fi

# the example solutions by task id: the fast kernel of each problem this device can run
if [[ -z "${DEMONSTRATIONS:-}" ]]; then
  DEMONSTRATIONS="$WORK_DIR/solutions"
  if [[ ! -d "$DEMONSTRATIONS" ]]; then
    solutions="$REPO/examples/solutions"
    if [[ "$DEVICE" == cuda ]]; then
      pairs=("diag_matmul diag_matmul/cuda_fast" "diag_matmul_cuda diag_matmul/cuda_fast" "softmax_cuda softmax/cuda_fast")
    else
      pairs=("diag_matmul diag_matmul/cpu_fast")
    fi
    mkdir -p "$DEMONSTRATIONS.partial/examples"
    for pair in "${pairs[@]}"; do
      read -r task solution <<< "$pair"
      cp -r "$solutions/$solution" "$DEMONSTRATIONS.partial/examples/$task"
    done
    mv "$DEMONSTRATIONS.partial" "$DEMONSTRATIONS"
  fi
fi
[[ "$DEMONSTRATIONS" == none ]] && DEMONSTRATIONS=""

# the recipe's loop registry with a short episode (collect and stage 4)
prompt_4=6144 response_4="${RESPONSE_4:-1024}"
loops="$WORK_DIR/agent_loops_short.yaml"
python3 -P - "$HERE/config/agent_loops.yaml" "$loops" "${MAX_TURNS_4:-3}" $((prompt_4 + response_4)) <<'PY' || exit 1
import sys, yaml
loops = yaml.safe_load(open(sys.argv[1]))
for loop in loops:
    if "limits" in loop:
        loop["limits"].update(max_turns=int(sys.argv[3]), max_total_tokens=int(sys.argv[4]))
yaml.safe_dump(loops, open(sys.argv[2], "w"), sort_keys=False)
PY

if [[ "$DEVICE" == cuda ]]; then
  export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
  socket="$WORK_DIR/pool.sock"
  say "pool: cuda-agent pool serve on GPU $CUDA_VISIBLE_DEVICES (log: $WORK_DIR/logs/pool.log)"
  python3 -P -m cuda_agent.cli.main pool serve --device cuda --devices 0 --socket "$socket" \
    >>"$WORK_DIR/logs/pool.log" 2>&1 &
  pool_pid=$!
  trap 'kill $pool_pid 2>/dev/null; wait $pool_pid 2>/dev/null' EXIT
  for _ in $(seq 120); do
    python3 -P -m cuda_agent.cli.main pool status --address "$socket" --json >/dev/null 2>&1 && break
    kill -0 $pool_pid 2>/dev/null || { echo "the pool died:" >&2; tail -20 "$WORK_DIR/logs/pool.log" >&2; exit 1; }
    sleep 1
  done
  export CUDA_AGENT_POOL="$socket"
  platform=(actor_rollout_ref.rollout.dtype=bfloat16)
  dtype=bfloat16 batch=2
else
  unset CUDA_AGENT_POOL
  export VERL_PLATFORM=cpu RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1
  platform=(actor_rollout_ref.rollout.dtype=float32 actor_rollout_ref.rollout.calculate_log_probs=true
            actor_rollout_ref.actor.strategy=fsdp2 actor_rollout_ref.ref.strategy=fsdp2 critic.strategy=fsdp2
            trainer.device=cpu +ray_kwargs.ray_init.num_gpus=1)
  dtype=float32 batch=1  # one task on CPU
fi

# what every PPO run shares (stage 1, collect, stage 4): one GPU, small batches, the hf rollout server; Ray is
# told of >= 12 CPUs (veRL's workers ask for several each; a logical count, the work is light)
ppo=(
  actor_rollout_ref.rollout.name=hf actor_rollout_ref.rollout.tensor_model_parallel_size=1 "${platform[@]}"
  'trainer.logger=[console]' data.train_batch_size=$batch data.dataloader_num_workers=0 actor_rollout_ref.rollout.n=1
  actor_rollout_ref.actor.ppo_mini_batch_size=$batch critic.ppo_mini_batch_size=$batch
  actor_rollout_ref.model.use_remove_padding=false critic.model.use_remove_padding=false
  "+actor_rollout_ref.model.override_config.attn_implementation=${ATTENTION:-sdpa}"
  "+critic.model.override_config.attn_implementation=${ATTENTION:-sdpa}"
  actor_rollout_ref.rollout.agent.num_workers=1 transfer_queue.backend.SimpleStorage.num_data_storage_units=1
  ray_kwargs.ray_init.num_cpus="$(( $(nproc) > 12 ? $(nproc) : 12 ))" +ray_kwargs.ray_init.include_dashboard=false
)
# training runs (stage 1, stage 4): PPO_STEPS steps, a checkpoint at the last (the next stage reads it)
train=(trainer.total_training_steps="${PPO_STEPS:-1}" trainer.total_epochs=100 trainer.val_before_train=false
       trainer.test_freq=-1)
lengths() {  # prompt response: the lengths a PPO run is given
  echo "data.max_prompt_length=$1 data.max_response_length=$2 actor_rollout_ref.rollout.max_model_len=$(($1 + $2))" \
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$((2 * ($1 + $2))) critic.ppo_max_token_len_per_gpu=$((2 * ($1 + $2)))"
}
sft_length=16384
rft=(data.max_length=$sft_length data.max_token_len_per_gpu=$sft_length data.train_batch_size=1
     data.micro_batch_size_per_gpu=1 data.num_workers=0 engine.use_torch_compile=false
     "+model.override_config.attn_implementation=${ATTENTION:-sdpa}" trainer.total_training_steps="${RFT_STEPS:-1}"
     trainer.device="$DEVICE" 'trainer.logger=[console]')
# run_pipeline.sh splits each *_ARGS on spaces: one line each, the caller's last (they win)
export STAGE1_ARGS="${ppo[*]} ${train[*]} $(lengths 2048 "${RESPONSE_1:-256}") ${STAGE1_ARGS:-}"
export COLLECT_ARGS="${ppo[*]} $(lengths $prompt_4 "$response_4") ${COLLECT_ARGS:-}"
export STAGE4_ARGS="${ppo[*]} ${train[*]} $(lengths $prompt_4 "$response_4") ${STAGE4_ARGS:-}"
export RFT_ARGS="${rft[*]} ${RFT_ARGS:-}"
export VALUE_ARGS="--batch-size 2 --lr 1e-4 --dtype $dtype --max-length $sft_length ${VALUE_ARGS:-}"
export VALUE_STEPS="${VALUE_STEPS:-2}" COLLECT_SAMPLES="${COLLECT_SAMPLES:-1}" AGENT_LOOPS="$loops"
export BASELINE_JOBS="${BASELINE_JOBS:-4}" BASELINE_DEVICE="$DEVICE"

stages="${STAGES:-baselines stage1 merge collect demonstrate filter rft value stage4}"
if [[ "$DEVICE" == cpu && " $stages " == *" rft "* ]]; then
  # veRL 0.9.1's sft_trainer opens its process group as cpu:gloo,<device>:<backend>: NCCL without the CPU
  # platform, gloo twice with it (torch refuses both on a CPU-only machine)
  say "rft: not on CPU (veRL's sft_trainer needs a GPU); value and stage 4 read WORK_DIR/rft_hf: link a model there"
  stages="${stages/rft/}"
fi
say "pipeline: $WORK_DIR (stage logs in $WORK_DIR/logs)"
BASE_MODEL="$BASE_MODEL" SINGLE_TURN_FILES="$DATA/single_turn.parquet" AGENTIC_FILES="$DATA/agentic.parquet" \
  WORK_DIR="$WORK_DIR" DEMONSTRATIONS="$DEMONSTRATIONS" STAGE_LOGS="$WORK_DIR/logs" STAGES="$stages" \
  bash "$HERE/run_pipeline.sh"
status=$?
say "pipeline: exit status $status"
exit $status
