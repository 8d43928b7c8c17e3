#!/usr/bin/env bash
# The CUDA Agent training pipeline, end to end (the paper, section 3; docs/training.md):
#   0 baselines  eager / torch.compile baselines of every training task, measured ahead into the pool's
#              baseline cache (cuda-agent baselines)      -> $WORK_DIR/baselines/  (one JSONL per dataset)
#   1 stage1   single-turn PPO of the base model            -> $WORK_DIR/stage1/     (veRL checkpoints)
#   2 merge    python -m verl.model_merger (stage-1 actor)  -> $WORK_DIR/stage1_hf/  (Hugging Face)
#   3 collect  agentic rollouts of the stage-1 model
#              (trainer.val_only=true, loop trajectory_dir) -> $WORK_DIR/trajectories/ (records)
#   3b demonstrate  (only with DEMONSTRATIONS=DIR of <task_id>/model_new.py + kernels/) each collect task's
#              known solution written through the agent's tools by a scripted agent, recorded as a
#              demonstration beside the collected trajectories (cuda-agent run --demonstrate): a small
#              model rarely earns a positive reward, and the filter keeps only those
#                                                           -> $WORK_DIR/trajectories/run-*.jsonl
#   4 filter   cuda-agent rft filter                        -> $WORK_DIR/sft.parquet
#   5 rft      verl.trainer.sft_trainer (run_rft.sh)        -> $WORK_DIR/rft/, $WORK_DIR/rft_hf -> its last HF folder
#   6 value    value pre-training (run_value_pretrain.sh)   -> $WORK_DIR/critic/     (critic.model.path)
#   7 stage4   agentic PPO, actor rft_hf, critic critic     -> $WORK_DIR/stage4/
# Each stage's output is the next one's input. A stage whose output exists is skipped (resume: rerun
# the same command); training stages mark their folder with .stage_done when their command succeeds
# (an interrupted one starts again, from its last checkpoint where veRL kept one), the others write
# a partial output and rename it when done.
#
#   BASE_MODEL=/models/Seed-Coder SINGLE_TURN_FILES=/data/ops_single_turn.parquet \
#   AGENTIC_FILES=/data/ops_agentic.parquet WORK_DIR=/ckpt/cuda_agent CUDA_AGENT_POOL=/run/pool.sock \
#     bash recipe/cuda_agent/run_pipeline.sh
#
# Environment: BASE_MODEL, SINGLE_TURN_FILES, AGENTIC_FILES, WORK_DIR (required); COLLECT_FILES (tasks
# for collection, default AGENTIC_FILES); COLLECT_SAMPLES (trajectories per task, 4); VAL_FILES (stage
# 1/4 validation, default the training files); CUDA_AGENT_POOL (the pool served on dedicated GPUs by
# `cuda-agent pool serve`); BASELINE_CACHE (the pool's cache folder, its $CUDA_AGENT_CACHE; default this
# shell's $CUDA_AGENT_CACHE, else ~/.cache/cuda_agent: run the baselines stage on the pool's GPU model);
# BASELINE_JOBS (parallel torch.compile warm-up, 14); BASELINE_DEVICE (cuda | cpu, cuda); NNODES,
# GPUS_PER_NODE, TOOL_FORMAT as the stage scripts; DEMONSTRATIONS (a folder of known solutions,
# <task_id>/model_new.py + kernels/: the demonstrate stage); STAGES (the stages to run, default all:
# "baselines stage1 merge collect demonstrate filter rft value stage4"); AGENT_LOOPS (the agent-loop
# registry of collect and stage 4, default config/agent_loops.yaml); VALUE_STEPS (value pre-training
# steps, 200); STAGE_LOGS (a folder: each stage's console output goes to STAGE_LOGS/<stage>.log instead
# of this terminal, and a failed stage prints its end); DRY_RUN=1 prints every stage's full command
# instead of running it. Per-stage overrides: STAGE1_ARGS, COLLECT_ARGS, RFT_ARGS, STAGE4_ARGS (Hydra),
# VALUE_ARGS (`cuda-agent value pretrain` options), each space-separated. One GPU at toy scale, the pool
# on the same GPU: run_pipeline_one_gpu.sh.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
: "${BASE_MODEL:?set BASE_MODEL to the base model (Hugging Face folder)}"
: "${SINGLE_TURN_FILES:?set SINGLE_TURN_FILES to the single-turn training parquet}"
: "${AGENTIC_FILES:?set AGENTIC_FILES to the agentic training parquet}"
: "${WORK_DIR:?set WORK_DIR to the folder every stage writes under}"
STAGES="${STAGES:-baselines stage1 merge collect demonstrate filter rft value stage4}"
DRY_RUN="${DRY_RUN:-0}"
COLLECT_FILES="${COLLECT_FILES:-$AGENTIC_FILES}"
AGENT_LOOPS="${AGENT_LOOPS:-$HERE/config/agent_loops.yaml}"

STAGE1_DIR="$WORK_DIR/stage1"
STAGE1_HF="$WORK_DIR/stage1_hf"
TRAJECTORIES="$WORK_DIR/trajectories"
SFT="$WORK_DIR/sft.parquet"
SFT_PARTIAL="$WORK_DIR/sft.partial.parquet"  # the filter writes .parquet files only
RFT_DIR="$WORK_DIR/rft"
RFT_HF="$WORK_DIR/rft_hf"
CRITIC="$WORK_DIR/critic"
STAGE4_DIR="$WORK_DIR/stage4"

wants() { [[ " $STAGES " == *" $1 "* ]]; }

# run NAME OUTPUT COMMAND...: skip when OUTPUT exists; print instead of running under DRY_RUN=1
run() {
  local name="$1" output="$2"; shift 2
  if [[ -e "$output" ]]; then
    echo "[pipeline] $name: skipped, $output exists" >&2
    return 0
  fi
  echo "[pipeline] $name -> $output ($(date +%T))" >&2
  if [[ "$DRY_RUN" == "1" ]]; then
    printf '%q ' "$@"; echo
    return 0
  fi
  local started=$SECONDS
  if [[ -n "${STAGE_LOGS:-}" ]]; then
    local log="$STAGE_LOGS/${name//[^A-Za-z0-9_]/_}.log"
    mkdir -p "$STAGE_LOGS"
    "$@" >"$log" 2>&1 || {
      local rc=$?
      echo "[pipeline] $name: FAILED (exit $rc) after $(( SECONDS - started )) s; the end of $log:" >&2
      tail -40 "$log" >&2
      return $rc
    }
  else
    "$@"
  fi
  echo "[pipeline] $name: finished in $(( SECONDS - started )) s" >&2
}

# run_into NAME OUTPUT PARTIAL COMMAND...: as run, for a command that writes PARTIAL (named in COMMAND);
# it becomes OUTPUT only once the command succeeds, so an interrupted stage is re-run, never skipped
run_into() {
  local name="$1" output="$2" partial="$3"; shift 3
  [[ -e "$output" || "$DRY_RUN" == "1" ]] || rm -rf "$partial"
  run "$name" "$output" "$@"
  [[ -e "$output" || "$DRY_RUN" == "1" ]] || mv "$partial" "$output"
}

# the last global_step_N of a veRL checkpoint folder (a placeholder before it exists, for DRY_RUN)
last_step() {
  local tracker="$1/latest_checkpointed_iteration.txt"
  if [[ -f "$tracker" ]]; then echo "$1/global_step_$(cat "$tracker")"; else echo "$1/global_step_LAST"; fi
}

# a stage's command and its mark are two statements: `cmd && mark_done` would not stop the pipeline
# (set -e ignores a failure on the left of &&) when the stage fails
mark_done() { [[ "$DRY_RUN" == "1" ]] || touch "$1/.stage_done"; }

read -r -a stage1_args <<< "${STAGE1_ARGS:-}"
read -r -a collect_args <<< "${COLLECT_ARGS:-}"
read -r -a rft_args <<< "${RFT_ARGS:-}"
read -r -a value_args <<< "${VALUE_ARGS:-}"
read -r -a stage4_args <<< "${STAGE4_ARGS:-}"

# Baselines measured ahead, by trusted code on a quiet device, before any trajectory runs: otherwise
# a task's first evaluation measures them, at a moment an agent chooses (docs/harness.md, Known limits).
if wants baselines; then
  cache_env=()
  [[ -n "${BASELINE_CACHE:-}" ]] && cache_env=(CUDA_AGENT_CACHE="$BASELINE_CACHE")
  declare -A seen=()
  for files in "$SINGLE_TURN_FILES" "$AGENTIC_FILES" "$COLLECT_FILES"; do
    [[ -n "${seen[$files]:-}" ]] && continue
    seen[$files]=1
    name="$(basename "$files" .parquet)"
    run "baselines ($name)" "$WORK_DIR/baselines/$name.done" env "${cache_env[@]}" python3 -P -m cuda_agent.cli.main \
      baselines --dataset "$files" --device "${BASELINE_DEVICE:-cuda}" --jobs "${BASELINE_JOBS:-14}" \
      --out "$WORK_DIR/baselines/$name.jsonl"
    [[ "$DRY_RUN" == "1" ]] || touch "$WORK_DIR/baselines/$name.done"
  done
fi

if wants stage1; then
  run stage1 "$STAGE1_DIR/.stage_done" env MODEL_PATH="$BASE_MODEL" TRAIN_FILES="$SINGLE_TURN_FILES" \
    VAL_FILES="${VAL_FILES:-$SINGLE_TURN_FILES}" bash "$HERE/run_single_turn_ppo.sh" \
    trainer.default_local_dir="$STAGE1_DIR" "${stage1_args[@]}"
  mark_done "$STAGE1_DIR"
fi

if wants merge; then
  run_into merge "$STAGE1_HF" "$STAGE1_HF.partial" python3 -m verl.model_merger merge --backend fsdp \
    --local_dir "$(last_step "$STAGE1_DIR")/actor" --target_dir "$STAGE1_HF.partial"
fi

if wants collect; then
  loops="$WORK_DIR/collect_agent_loops.yaml"
  # the recipe's agent loops with trajectory_dir set (the loop writes one record per rollout)
  write_loops=(python3 -c "import sys, yaml; e = yaml.safe_load(open(sys.argv[1]));
[x.update(trajectory_dir=sys.argv[3]) for x in e if x['name'] != 'cuda_agent_single_turn'];
yaml.safe_dump(e, open(sys.argv[2], 'w'))" "$AGENT_LOOPS" "$loops" "$TRAJECTORIES")
  if [[ ! -e "$TRAJECTORIES/.stage_done" ]]; then
    if [[ "$DRY_RUN" == "1" ]]; then printf '%q ' "${write_loops[@]}"; echo; else mkdir -p "$WORK_DIR"; "${write_loops[@]}"; fi
  fi
  run collect "$TRAJECTORIES/.stage_done" env ACTOR_PATH="$STAGE1_HF" CRITIC_PATH="$STAGE1_HF" \
    TRAIN_FILES="$COLLECT_FILES" VAL_FILES="$COLLECT_FILES" bash "$HERE/run_agentic_ppo.sh" \
    trainer.val_only=true trainer.val_before_train=true \
    actor_rollout_ref.rollout.val_kwargs.n="${COLLECT_SAMPLES:-4}" actor_rollout_ref.rollout.val_kwargs.do_sample=true \
    actor_rollout_ref.rollout.val_kwargs.temperature=1.0 \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$loops" \
    trainer.default_local_dir="$WORK_DIR/collect" "${collect_args[@]}"
  mark_done "$TRAJECTORIES"
fi

if wants demonstrate && [[ -n "${DEMONSTRATIONS:-}" ]]; then
  run demonstrate "$WORK_DIR/demonstrations.done" python3 -P -m cuda_agent.cli.main run --dataset "$COLLECT_FILES" \
    --solutions "$DEMONSTRATIONS" --demonstrate --records "$TRAJECTORIES" --out "$WORK_DIR/demonstrations.jsonl"
  [[ "$DRY_RUN" == "1" ]] || touch "$WORK_DIR/demonstrations.done"
fi

if wants filter; then
  run_into filter "$SFT" "$SFT_PARTIAL" python3 -P -m cuda_agent.cli.main rft filter "$TRAJECTORIES" \
    --out "$SFT_PARTIAL"
fi

if wants rft; then
  run rft "$RFT_DIR/.stage_done" env MODEL_PATH="$STAGE1_HF" SFT_FILES="$SFT" OUT_DIR="$RFT_DIR" \
    bash "$HERE/run_rft.sh" "${rft_args[@]}"
  mark_done "$RFT_DIR"
  run rft_hf "$RFT_HF" ln -s "$(last_step "$RFT_DIR")/huggingface" "$RFT_HF"
fi

if wants value; then
  run_into value "$CRITIC" "$CRITIC.partial" env MODEL_PATH="$RFT_HF" TRAJECTORIES="$TRAJECTORIES" \
    OUT_DIR="$CRITIC.partial" STEPS="${VALUE_STEPS:-200}" bash "$HERE/run_value_pretrain.sh" "${value_args[@]}"
fi

if wants stage4; then
  run stage4 "$STAGE4_DIR/.stage_done" env ACTOR_PATH="$RFT_HF" CRITIC_PATH="$CRITIC" TRAIN_FILES="$AGENTIC_FILES" \
    VAL_FILES="${VAL_FILES:-$AGENTIC_FILES}" bash "$HERE/run_agentic_ppo.sh" \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$AGENT_LOOPS" \
    trainer.default_local_dir="$STAGE4_DIR" "${stage4_args[@]}"
  mark_done "$STAGE4_DIR"
fi
echo "[pipeline] done: actor $STAGE4_DIR, critic $CRITIC" >&2
