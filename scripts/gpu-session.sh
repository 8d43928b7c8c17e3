#!/usr/bin/env bash
# Everything the open issues measure on a GPU node, in one call of the device machine (one or two H200s):
#   tests   GPU-marked tests (issue 2 harness, issue 12 approximation twins, issue 36 precision twins, issue 3 faults, issue 15 reward service: skipped
#           without fastapi/uvicorn/httpx on the node)                              -> gpu-tests.log
#   bench   per-evaluation wall time, three tasks (issue 2)                           -> bench_eval.json/.log
#   verifycost  issue 12: verify-stage seconds with the approximation defence (6 draws + 1 influence twin)
#           against the previous 5 draws, two test problems, 5 repeats; ~1 min on GPU 0 -> verify_trials_cuda.json
#   data    data pipeline (issue 17): crawl, compose DATA_COUNT (200) tasks, filter them with the paper's
#           [1, 100] ms window and inductor, export, dataset report; on the last GPU, in parallel with
#           tests+bench when there are two GPUs; ~4 min on one H200 (300: ~5.5 min). DATA_RECHECK=1 adds a second
#           filter run of the kept tasks (+~1.5 min); decontaminates against DATA_KERNELBENCH
#           (default .kernelbench/KernelBench, carried; --no-decontam without it)  -> data.log, data.tgz, data_pipeline_report.json, data_dataset_report.{json,md},
#                                  data_eager_ms.png, data_report.json (the filter's)
#   load    issue 46: bench_load.py on GPU 0, the quickstart's cuda candidates quiet, then beside another process's
#           fp32 matmuls on the same GPU, then quiet again; with the window check, then without it (the
#           behaviour before it; LOAD_NAMES=load_cuda for the first alone), LOAD_REPEATS (3) per phase; ~2 x 2 min             -> load_cuda.json, load_cuda_unchecked.json, load.log
#   pool1   pool throughput, 16 submitters, one GPU (issue 3), on the last GPU        -> pool_1gpu.json/.log
#   pool1p  control: one GPU, its worker in a process of its own                      -> pool_1gpu_process.json/.log
#   pool2   the same on two GPUs, a worker process per GPU (the default)              -> pool_2gpu.json/.log
#   pool2in control: two GPUs with both workers in one process                        -> pool_2gpu_in_process.json/.log
#   poolsweep issue 12: one GPU, pipelined worker (default depth), 1/4/16/32 submitters; then one at a
#           time (--pipeline-depth 1, 16 submitters); then every job compiling (16 submitters).
#           NVML GPU utilisation per point. <= 4 min (timeouts 140 + 50 + 45 s; each JSON written per point);
#           POOLSWEEP_POINTS picks the extra points (default "depth1 fresh"; "depth8": 8 evaluations in flight)
#                                                                   -> pool_sweep.json, pool_depth1.json, pool_fresh.json, pool_sweep.log
#   pool16  issue 12's target point alone: one GPU, 16 submitters, 48 jobs at the default depth (4), then
#           32 jobs at depth 8; ~2 min                               -> pool16_depth4.json, pool16_depth8.json, pool16.log
#   poolmix issue 36: the pool16 point with --mix softmax_big (every other job a 16384x8192 row softmax, 1 GB per
#           call): 48 jobs at depth 4, then 32 at depth 8 (POOLMIX_DEPTHS); statuses per kind, infra errors' messages and peak GPU
#           memory (NVML) per point; ~3 min                 -> poolmix_depth4.json, poolmix_depth8.json, poolmix.log
#   poolstack issue 12: the target point (one GPU, 16 submitters, 48 jobs, depth 4) with the benchmark process's
#           threads sampled (bench_pool.py --stack-samples): where the parent's time goes; ~1 min
#                                                                   -> poolstack.json, poolstack_stacks.json, poolstack.log
#   poolsweep2 issue 16: the same sweep on two GPUs (a worker process per GPU); needs 2 GPUs -> pool_sweep_2gpu.json
#   agentpath  the agent's per-call path (issue 12): skill scripts through a served pool, `cuda-agent eval`
#           (static reject, cold, unchanged) and the official-style scripts on the same workspace; ~4 min
#           on one H200 (AGENTPATH_CASES=diag_matmul,softmax for both tasks, ~+3 min); then the cold eval's
#           timeline (benchmarks/agent_path/eval_timeline.py: empty caches, then warm), ~1 min
#                                  -> agentpath/results.{json,md}, agentpath/eval_timeline_{cold,warm}.{txt,json}, agentpath.log
#   timeline  issue 12: the cold `cuda-agent eval` phase by phase on GPU 0 (eval_timeline.py), three runs on one
#           cache: every cache empty; then a new candidate (its build cold, the task's baselines cached: the
#           agent's usual cold eval); then the same candidate again (build cached); then bench_prepare.py
#           (the parent's reference preparation alone); then TIMELINE_AB (4) pairs of cached-build runs, the
#           forkserver started early (as `cuda-agent eval`) / late (--late-zygote), and TIMELINE_CLI (5) real `cuda-agent
#           eval --no-cache` runs (bench_cli_exit.py: answer and exit); ~3 min
#                                  -> timeline.tgz (timeline/{cold,fresh_build,warm,ab_*}.{txt,json}, ab.txt, cli_exit.json), prepare.json
#   kernelbench  the runner (issue 14) through the scripted endpoint on KernelBench level 1/2 problems with
#           hand-written kernels (benchmarks/runner/kb_solutions), the whole loop real, + the HTML report; then
#           eager/torch.compile baselines of as many level 1-3 problems as fit in KB_BUDGET (110) s, ranked
#           against KernelBench's published H100 timings; needs .kernelbench/ carried; <= ~5 min on GPU 0
#                                      -> kb.tgz (kb/kb_run.jsonl, kb_phase.json, kb_report/ with report.html,
#                                         trajectories; kb_baselines.jsonl), kb_baseline_ranking.md, kernelbench.log
#   kbbaselines  issue 14: the full baseline pass, eager + torch.compile of every KernelBench problem of KB_LEVELS
#           (1,2,3), resumable over calls: results and caches live in .cache/kbbaselines/ (git-ignored; the device
#           keeps it while warm: carry it only to a fresh machine, with the lines of earlier calls in it). Each batch is compiled
#           ahead by KB_JOBS (14) parallel untimed children into a shared reference compile cache, then timed one
#           problem at a time; no new work after KB_CAP (470) s, a hard stop at KB_CAP+60 s; then the ranking
#           against KernelBench's published H100 timings. Needs .kernelbench/ and .whl/ carried; GPU 0
#                                      -> kb_baselines.jsonl (all calls so far), kb_baselines.log, kbbaselines.json
#                                         (this call), kb_calls.jsonl (every call), kb_baseline_ranking.md
#   train  issue 13: one RFT step (torchrun -m verl.trainer.sft_trainer with cuda_agent_rft_sft.yaml, 1 GPU) and a
#           3-step value pre-training run (cuda-agent value pretrain), on a SmolLM2-135M-shaped Llama built from its
#           config (random weights) and the offline tokenizer; veRL and its small deps from .whl-train/ (carry it),
#           Ray replaced by a test-only import shim (benchmarks/training/shims); GPU 0, bounded to 180 s
#                                                                           -> train.log, train_summary.json
#   hfengine  issue 42/43: the hf rollout engine (rollout.name=hf) on GPU 0 without veRL: tokens/s at batch 1 and 8
#           (bf16, SmolLM2-135M shape, random weights) and its log-probs against an fp32 recompute; < 1 min
#                                                                           -> hf_engine_cuda.json/.log
#   ppo    issue 43: stage 1 and stage 4 of the recipe, PPO_STEPS (2) main_ppo steps each, on GPU 0
#           (benchmarks/training/ppo_one_gpu.sh: rollout.name=hf, FSDP actor and critic, the pool served on the same GPU)
#           with SmolLM2-135M-Instruct's real weights. Needs what bash scripts/build_ppo_carry.sh builds: .whl-ppo/
#           (veRL, TransferQueue, their small deps, Ray 2.60.0 cp312 stripped) and .smollm2-gguf/part-{a,b,c}, carried
#           over three warm calls (64 MiB a call): [.whl, .whl-ppo, .smollm2-gguf/part-a] with PPO_STAGES="", then
#           [.smollm2-gguf/part-b] with PPO_STAGES="", then [.smollm2-gguf/part-c] with PPO_STAGES=1, then PPO_STAGES=4.
#           Each part and the install stay on the warm machine. Proves a Ray GPU actor first.
#                                                   -> ppo.log, ppo_stages<N>.tgz (ppo/: stage{1,4}.log, ppo_summary.{json,txt}, pool*)
#   pipeline  issue 44: the whole training pipeline (recipe/cuda_agent/run_pipeline_one_gpu.sh: baselines, stage 1,
#           merge, collect, demonstrate, filter, RFT, value pre-training, stage 4) on GPU 0 with SmolLM2-135M-Instruct,
#           its work in /tmp/cuda_agent_pipeline, resumed over warm calls (each call runs it again; finished stages
#           are skipped): the same carry as ppo (before the model is here only the baselines stage runs);
#           PIPELINE_TIMEOUT (540 s a run), PIPELINE_RUNS (1; 2 shows a second run skipping all), PIPELINE_STAGES;
#           SMOLLM2_WEIGHTS=random with .smollm2-skeleton carried: the model's architecture, tokenizer and template
#           with random weights, all in the first call (ppo and pipeline)
#                                                   -> pipeline.log, pipeline_work.tgz (logs/, records, sft), pipeline_files.txt
# The pool phases run alone, one after the other, so no other work shares the CPUs they measure.
# Usage: OUT=dir PHASES="tests bench data pool1 pool2" DATA_COUNT=150 POOL_JOBS=48 TESTS_GPUS=0,1 bash scripts/gpu-session.sh
set -uo pipefail
OUT="${OUT:-$(mktemp -d)}"; PHASES="${PHASES:-tests bench data pool1 pool2}"
source scripts/gpu-env.sh
has() { [[ " $PHASES " == *" $1 "* ]]; }
GPUS=$(nvidia-smi -L | wc -l); LAST=$((GPUS - 1)); status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# Candidate compiles run in bubblewrap where it exists (harness/compiler/jail.py): say which case this is.
if command -v bwrap >/dev/null; then echo "compiler jail: $(bwrap --version)"; else echo "compiler jail: no bwrap here, compiles see the whole file system"; fi | tee -a "$OUT/gpu.txt"
t0=$(date +%s); stamp() { echo "[gpu-session +$(( $(date +%s) - t0 ))s] $*"; }

data_phase() {  # issue 17: paper window [1, 100] ms (the cuda default), inductor, dataset report
  stamp "data: start on GPU $LAST"
  local kb="${DATA_KERNELBENCH:-.kernelbench/KernelBench}" decontam="--no-decontam"
  [ -d "$kb" ] || [ -f "$kb" ] && decontam="--kernelbench $kb"
  local recheck=""; [ "${DATA_RECHECK:-0}" = 1 ] && recheck="--recheck"
  rm -rf /tmp/data_run
  CUDA_VISIBLE_DEVICES=$LAST timeout "${DATA_TIMEOUT:-480}" python3 -P -m cuda_agent.cli.main data pipeline \
    --device cuda --count "${DATA_COUNT:-200}" --out /tmp/data_run $decontam $recheck ${DATA_ARGS:-} >"$OUT/data.log" 2>&1
  echo "rc=$?" >>"$OUT/data.log"
  for f in pipeline_report.json dataset_report.json dataset_report.md eager_ms.png filter/report.json; do
    [ -f "/tmp/data_run/$f" ] && cp "/tmp/data_run/$f" "$OUT/data_$(basename "$f")"
  done
  tar -C /tmp -czf "$OUT/data.tgz" --exclude='*.so' data_run 2>/dev/null
  stamp "data: done"
}
pool_phase() {  # pool_phase <gpus: 1|2> [name suffix] [bench_pool args...]
  local gpus=$1 name="pool_$1gpu${2:-}" devices=0 jobs=${POOL_JOBS:-48}; shift; shift
  if [ "$gpus" = 1 ]; then devices=$LAST; else devices=0,1; jobs=$((2 * jobs)); fi
  stamp "$name: $gpus GPU(s) ($devices) $*"
  python3 -P benchmarks/pool/bench_pool.py --device cuda --devices "$devices" --submitters 16 --jobs "$jobs" \
    --out "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1
  stamp "$name done"; grep -E '"(evaluations_per_min|busy_fraction|worker_processes)"' "$OUT/$name.log"
}
agentpath_phase() {  # issue 12: per-step table, ours vs official-style, on GPU 0
  stamp "agentpath"
  CUDA_VISIBLE_DEVICES=0 timeout "${AGENTPATH_TIMEOUT:-300}" python3 -P benchmarks/agent_path/bench_agent_path.py \
    --device cuda --cases "${AGENTPATH_CASES:-diag_matmul}" --official-sums --step-timeout 120 \
    --out "$OUT/agentpath" >"$OUT/agentpath.log" 2>&1
  echo "rc=$?" >>"$OUT/agentpath.log"; tail -20 "$OUT/agentpath.log"
  # The cold `cuda-agent eval` phase by phase, every cache empty (compile and baselines missing: on cuda the
  # baselines are measured during the compile), then once more on the warm caches it filled.
  local tcache; tcache=$(mktemp -d); mkdir -p "$OUT/agentpath"
  for run in cold warm; do
    CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -P benchmarks/agent_path/eval_timeline.py --device cuda --cache "$tcache" \
      --json "$OUT/agentpath/eval_timeline_$run.json" >"$OUT/agentpath/eval_timeline_$run.txt" 2>&1
    echo "eval_timeline $run rc=$?" >>"$OUT/agentpath.log"; cat "$OUT/agentpath/eval_timeline_$run.txt"
  done
  rm -rf "$tcache"; stamp "agentpath done"
}
timeline_phase() {  # issue 12: cold eval phase by phase (every cache empty / new build / cached build), on GPU 0
  stamp "timeline"
  local tcache; tcache=$(mktemp -d); mkdir -p "$OUT/timeline"
  for run in cold fresh_build warm; do
    local extra=""; [ "$run" = fresh_build ] && extra="--fresh-build"
    CUDA_VISIBLE_DEVICES=0 timeout 200 python3 -P benchmarks/agent_path/eval_timeline.py --device cuda --cache "$tcache" \
      $extra --json "$OUT/timeline/$run.json" >"$OUT/timeline/$run.txt" 2>&1
    echo "eval_timeline $run rc=$?" >>"$OUT/timeline/$run.txt"; cat "$OUT/timeline/$run.txt"
  done
  # A/B on the same cache, build cached: the forkserver started before the CLI's imports (as `cuda-agent eval`
  # does, cli/entry.py) or where the one-shot path reaches it (--late-zygote); alternated, TIMELINE_AB pairs.
  for i in $(seq 1 "${TIMELINE_AB:-4}"); do
    for variant in early late; do
      local flag=""; [ "$variant" = late ] && flag="--late-zygote"
      CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -P benchmarks/agent_path/eval_timeline.py --device cuda --cache "$tcache" \
        $flag --json "$OUT/timeline/ab_${variant}_$i.json" >"$OUT/timeline/ab_${variant}_$i.txt" 2>&1
      echo "ab $variant $i: $(grep -E 'cold eval timeline' "$OUT/timeline/ab_${variant}_$i.txt") | $(grep -E 'stage compile' "$OUT/timeline/ab_${variant}_$i.txt" | awk '{print "compile " $NF}')" | tee -a "$OUT/timeline/ab.txt"
    done
  done
  # The real command, build cached (one workspace, --no-cache): when its answer arrives and when it has exited.
  local ws; ws=$(mktemp -d)/ws
  cuda_agent init examples/problems/diag_matmul_cuda.py "$ws" --device cuda >/dev/null && rm -f "$ws"/kernels/* && \
    cp -r examples/solutions/diag_matmul/cuda_fast/. "$ws"/
  CUDA_AGENT_CACHE="$tcache" CUDA_VISIBLE_DEVICES=0 timeout 150 python3 -P benchmarks/agent_path/bench_cli_exit.py \
    --repeats "${TIMELINE_CLI:-5}" -- python3 -P -m cuda_agent.cli.main eval "$ws" --json --no-cache >"$OUT/timeline/cli_exit.json" 2>&1
  grep -E '"median|"(answer|exit)_s"' "$OUT/timeline/cli_exit.json" | tr -d '\n'; echo
  rm -rf "$tcache" "$(dirname "$ws")"
  CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -P benchmarks/harness/bench_prepare.py --device cuda --repeats 10 \
    >"$OUT/prepare.json" 2>&1; cat "$OUT/prepare.json"
  tar czf "$OUT/timeline.tgz" -C "$OUT" timeline && rm -rf "$OUT/timeline"  # few files come back from a device call
  stamp "timeline done"
}
pool_sweep() {  # pool_sweep <devices> <name suffix>: the issue-12 sweep, one shared cache (baselines measured once)
  local devices=$1 sfx=$2 cache=/tmp/poolsweep_cache$2 log="$OUT/pool_sweep$2.log"; local n; n=$(( $(tr -cd , <<<"$devices" | wc -c) + 1 ))
  local bench="python3 -P benchmarks/pool/bench_pool.py --device cuda --devices $devices --cache $cache"
  stamp "pool_sweep$sfx: GPUs $devices"
  timeout 140 $bench --submitters 1,4,16,32 --jobs $((4 * n)),$((16 * n)),$((32 * n)),$((32 * n)) \
    --out "$OUT/pool_sweep$sfx.json" >"$log" 2>&1; echo "sweep rc=$?" >>"$log"
  local points=" ${POOLSWEEP_POINTS:-depth1 fresh} "
  if [[ $points == *" depth1 "* ]]; then
    timeout 50 $bench --pipeline-depth 1 --submitters 16 --jobs $((12 * n)) --out "$OUT/pool_depth1$sfx.json" >>"$log" 2>&1
    echo "depth1 rc=$?" >>"$log"
  fi
  if [[ $points == *" depth8 "* ]]; then  # 8 evaluations in flight per GPU instead of the default 4
    timeout 50 $bench --pipeline-depth 8 --submitters 16 --jobs $((32 * n)) --out "$OUT/pool_depth8$sfx.json" >>"$log" 2>&1
    echo "depth8 rc=$?" >>"$log"
  fi
  if [[ $points == *" fresh "* ]]; then
    timeout 45 $bench --fresh-kernels --submitters 16 --jobs $((16 * n)) --out "$OUT/pool_fresh$sfx.json" >>"$log" 2>&1
    echo "fresh rc=$?" >>"$log"
  fi
  stamp "pool_sweep$sfx done"; grep -E '^\[bench_pool\]|rc=' "$log"
}
if has data && [ "$GPUS" -ge 2 ]; then data_phase & data_pid=$!; fi

if has tests; then
  stamp "tests"
  # Every GPU (the two-GPU pool test needs two), except the one the data phase is using.
  CUDA_VISIBLE_DEVICES=${TESTS_GPUS:-$(if has data; then echo 0; else seq -s, 0 "$LAST"; fi)} timeout "${TESTS_TIMEOUT:-500}" python3 -P -m pytest -p no:cacheprovider -m gpu -v -s \
    ${TEST_PATHS:-tests/sandbox_pool/harness/test_gpu.py tests/sandbox_pool/harness/test_gpu_approximation.py tests/sandbox_pool/harness/test_gpu_precision.py tests/sandbox_pool/harness/test_gpu_memory.py tests/sandbox_pool/harness/test_compiler_jail.py tests/sandbox_pool/harness/test_eval_overlap.py tests/sandbox_pool/pool/test_pool_gpu_faults.py tests/data_gen/test_data_filter.py tests/service/test_service_gpu.py} 2>&1 | tee "$OUT/gpu-tests.log" >/dev/null
  status=${PIPESTATUS[0]}; tail -5 "$OUT/gpu-tests.log"
fi
if has bench; then
  stamp "bench"
  CUDA_VISIBLE_DEVICES=0 python3 -P benchmarks/harness/bench_eval.py --device cuda --repeats "${BENCH_REPEATS:-3}" \
    --out "$OUT/bench_eval.json" >"$OUT/bench.log" 2>&1; tail -8 "$OUT/bench.log"
fi
if has load; then  # issue 46: rewards beside a GPU neighbour, with and without the window check
  stamp "load"
  for name in ${LOAD_NAMES:-load_cuda load_cuda_unchecked}; do
    flag=$([ "$name" = load_cuda_unchecked ] && echo --no-window-check)
    CUDA_VISIBLE_DEVICES=0 timeout "${LOAD_TIMEOUT:-300}" python3 -P benchmarks/harness/bench_load.py --device cuda \
      --repeats "${LOAD_REPEATS:-3}" $flag --out "$OUT/$name.json" >>"$OUT/load.log" 2>&1
    echo "$name rc=$?" >>"$OUT/load.log"
  done
  stamp "load done"; grep -E 'rc=|"reward_flips"|"machine_loaded_errors"|wall_s_median' "$OUT/load.log"
fi
if has verifycost; then  # issue 12: verify time, 6 draws + 1 influence twin vs the old 5 draws, on GPU 0
  stamp "verifycost"
  CUDA_VISIBLE_DEVICES=0 timeout "${VERIFYCOST_TIMEOUT:-240}" python3 -P benchmarks/harness/bench_verify_trials.py \
    --device cuda --repeats 5 --out "$OUT/verify_trials_cuda.json" >"$OUT/verifycost.log" 2>&1
  echo "rc=$?" >>"$OUT/verifycost.log"; tail -12 "$OUT/verifycost.log"; stamp "verifycost done"
fi
if has data; then
  if [ -n "${data_pid:-}" ]; then wait "$data_pid"; else data_phase; fi
  tail -25 "$OUT/data.log"
fi
kernelbench_phase() {  # issue 14: runner loop on KernelBench + baseline ranking vs published timings, GPU 0
  stamp "kernelbench: runner on hand-written kernels"
  CUDA_VISIBLE_DEVICES=0 timeout 170 python3 -P benchmarks/runner/kb_phase.py --kernelbench .kernelbench \
    --device cuda --out "$OUT/kb" >"$OUT/kernelbench.log" 2>&1; echo "kb_phase rc=$?" | tee -a "$OUT/kernelbench.log"
  stamp "kernelbench: baselines (budget ${KB_BUDGET:-110} s)"
  local b0=$(date +%s)
  CUDA_VISIBLE_DEVICES=0 timeout $(( ${KB_BUDGET:-110} + 60 )) python3 -P -m cuda_agent.cli.main baselines \
    --kernelbench .kernelbench --level 1,2,3 --device cuda --budget "${KB_BUDGET:-110}" \
    --out "$OUT/kb_baselines.jsonl" --json >>"$OUT/kernelbench.log" 2>&1
  echo "baselines rc=$? wall_s=$(( $(date +%s) - b0 ))" | tee -a "$OUT/kernelbench.log"
  python3 -P benchmarks/runner/compare_baselines.py "$OUT/kb_baselines.jsonl" .kernelbench/results/timing/H100_Modal \
    --out "$OUT/kb_baseline_ranking.md" >>"$OUT/kernelbench.log" 2>&1
  tar -C "$OUT" -czf "$OUT/kb.tgz" kb kb_baselines.jsonl 2>/dev/null && rm -rf "$OUT/kb" "$OUT/kb_baselines.jsonl"
  stamp "kernelbench: done"; tail -20 "$OUT/kernelbench.log"
}
kbbaselines_phase() {  # issue 14: the full, resumable baseline pass + ranking table (docs/evaluation.md)
  local dir=.cache/kbbaselines cap=${KB_CAP:-470} b0; b0=$(date +%s); mkdir -p "$dir"
  local before; before=$(awk NF "$dir/kb_baselines.jsonl" 2>/dev/null | wc -l)
  stamp "kbbaselines: levels ${KB_LEVELS:-1,2,3}, ${KB_JOBS:-14} warm-up jobs, cap $cap s, $before already measured"
  COLUMNS=200 CUDA_VISIBLE_DEVICES=0 CUDA_AGENT_CACHE="$dir/cache" timeout $((cap + 60)) python3 -P -m cuda_agent.cli.main baselines \
    --kernelbench .kernelbench --level "${KB_LEVELS:-1,2,3}" --device cuda --jobs "${KB_JOBS:-14}" --budget "$cap" \
    --out "$dir/kb_baselines.jsonl" --json >"$OUT/kbbaselines.json" 2>"$OUT/kb_baselines.log"
  local rc=$?; echo "baselines rc=$rc wall_s=$(( $(date +%s) - b0 ))" | tee -a "$OUT/kb_baselines.log"
  if [ -s "$OUT/kbbaselines.json" ]; then cat "$OUT/kbbaselines.json" >>"$dir/calls.jsonl"
  else  # killed at the hard stop: still count the call's wall time in the pass's
    echo "{\"wall_s\": $(( $(date +%s) - b0 )), \"measured\": $(( $(awk NF "$dir/kb_baselines.jsonl" 2>/dev/null | wc -l) - before )), \"killed\": true, \"jobs\": ${KB_JOBS:-14}}" >>"$dir/calls.jsonl"
  fi
  cp "$dir/kb_baselines.jsonl" "$OUT/kb_baselines.jsonl" 2>/dev/null; cp "$dir/calls.jsonl" "$OUT/kb_calls.jsonl" 2>/dev/null
  python3 -P benchmarks/runner/compare_baselines.py "$dir/kb_baselines.jsonl" .kernelbench/results/timing/H100_Modal \
    .kernelbench/results/timing/H100_PCIe_LambdaLabs --calls "$dir/calls.jsonl" --out "$OUT/kb_baseline_ranking.md"
  stamp "kbbaselines: done ($(awk NF "$dir/kb_baselines.jsonl" 2>/dev/null | wc -l) measured in all)"
  grep -v '^\s*$' "$OUT/kb_baselines.log" | grep -v 'UserWarning\|warnings.warn' | tail -8
}
train_phase() {  # issue 13: one sft_trainer step + value pre-training on GPU 0 (<= 180 s)
  stamp "train"
  local site=/tmp/cuda_agent_train_site
  rm -rf "$site" /tmp/train_smoke
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl-train/*.whl >"$OUT/train.log" 2>&1
  CUDA_VISIBLE_DEVICES=0 PYTHONPATH="/tmp/cuda_agent_ns:$site:$(pwd)/benchmarks/training/shims:$SITE" \
    timeout "${TRAIN_TIMEOUT:-180}" python3 -P benchmarks/training/train_smoke.py --out /tmp/train_smoke \
    --device cuda --timeout 90 >>"$OUT/train.log" 2>&1
  echo "rc=$?" >>"$OUT/train.log"
  for f in sft value rft_filter; do
    [ -f "/tmp/train_smoke/$f.log" ] && { echo "===== $f.log (last 80 lines)"; tail -80 "/tmp/train_smoke/$f.log"; } >>"$OUT/train.log"
  done
  cp /tmp/train_smoke/summary.json "$OUT/train_summary.json" 2>/dev/null
  stamp "train done"; grep -E '"rc"|"wall_s"|^rc=' "$OUT/train.log" | head -12
}
hfengine_phase() {  # issue 42/43: the transformers rollout engine on CUDA (needs only pydantic from .whl/)
  stamp "hfengine"
  CUDA_VISIBLE_DEVICES=0 timeout "${HFENGINE_TIMEOUT:-240}" python3 -P benchmarks/training/bench_hf_engine.py \
    --device cuda --out "$OUT/hf_engine_cuda.json" >"$OUT/hf_engine_cuda.log" 2>&1
  echo "rc=$?" >>"$OUT/hf_engine_cuda.log"; stamp "hfengine done"; grep -E 'tokens_per_s|max_abs|^rc=' "$OUT/hf_engine_cuda.log" | tail -8
}
ppo_setup() {  # .whl-ppo installed, SmolLM2-135M-Instruct joined from its parts, a Ray GPU actor proved (each once a machine)
  local site=/tmp/cuda_agent_ppo_site parts=/tmp/cuda_agent_smollm2_parts log=$1
  mkdir -p "$PPO_WORK" "$parts"
  if [ ! -f "$site/.installed" ] && ls .whl-ppo/*.whl >/dev/null 2>&1; then
    stamp "ppo: install .whl-ppo"
    rm -rf "$site"; mkdir -p "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl-ppo/*.whl >>"$log" 2>&1 &&
      tar -xJf .whl-ppo/ray-2.60.0-cp312-stripped.tar.xz -C "$site" && touch "$site/.installed"
  fi
  [ -f "$site/.installed" ] || { echo "ppo: no .whl-ppo installed: carry .whl-ppo (bash scripts/build_ppo_carry.sh)"; return 1; }
  export PYTHONPATH="$site:$PYTHONPATH"
  # SmolLM2's GGUF arrives in parts over warm calls (64 MiB a call): keep each, join when all are here
  cp .smollm2-gguf/part-* .smollm2-gguf/SHA256SUMS "$parts/" 2>/dev/null
  stamp "ppo: GGUF parts here: $(ls "$parts" | tr '\n' ' ')"
  if [ ! -f "$PPO_WORK/model/config.json" ] && [ "${SMOLLM2_WEIGHTS:-}" = random ] && [ -f .smollm2-skeleton/config.json ]; then
    # SmolLM2-135M-Instruct's architecture, tokenizer and chat template with random weights (seed 0): one call
    # of carry instead of three, where what is checked is the machinery, not what the model writes
    stamp "ppo: SmolLM2-135M-Instruct with random weights (SMOLLM2_WEIGHTS=random)"
    python3 -P -c "
import shutil, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(0)
out = Path('$PPO_WORK/model.partial'); shutil.rmtree(out, ignore_errors=True)
model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained('.smollm2-skeleton'), dtype=torch.bfloat16)
model.save_pretrained(out)
for f in Path('.smollm2-skeleton').iterdir(): shutil.copy(f, out / f.name)
out.rename('$PPO_WORK/model')" >>"$log" 2>&1 || { echo "ppo: random-weight model failed"; tail -20 "$log"; return 1; }
  fi
  if [ ! -f "$PPO_WORK/model/config.json" ] && [ -f "$parts/part-a" ] && [ -f "$parts/part-b" ] && [ -f "$parts/part-c" ]; then
    cat "$parts"/part-a "$parts"/part-b "$parts"/part-c >"$PPO_WORK/SmolLM2-135M-Instruct.Q4_1.gguf"
    (cd "$PPO_WORK" && sha256sum -c "$parts/SHA256SUMS") >>"$log" 2>&1 || { echo "ppo: GGUF checksum mismatch"; return 1; }
    python3 -P -c "
import sys; sys.path.insert(0, 'tests/recipe')
from pathlib import Path
from smollm2 import write_smollm2_folder
write_smollm2_folder(Path('$PPO_WORK/model'), Path('$PPO_WORK/SmolLM2-135M-Instruct.Q4_1.gguf'))" >>"$log" 2>&1 ||
      { echo "ppo: model folder failed"; tail -20 "$log"; return 1; }
  fi
  if [ ! -f "$PPO_WORK/ray_checked" ]; then
    stamp "ppo: ray check"
    timeout 120 python3 -P -c "
import ray
ray.init(num_gpus=1, include_dashboard=False, object_store_memory=2 << 30)
@ray.remote(num_gpus=1)
def probe():
    import os, torch
    return os.environ.get('CUDA_VISIBLE_DEVICES'), float((torch.ones(64, 64, device='cuda') @ torch.ones(64, 64, device='cuda')).sum())
print('ray gpu actor:', ray.get(probe.remote())); ray.shutdown()" >>"$log" 2>&1 && touch "$PPO_WORK/ray_checked" ||
      { echo "ray check failed"; tail -30 "$log"; return 1; }
    grep 'ray gpu actor' "$log"
  fi
}
PPO_WORK=/tmp/cuda_agent_ppo
ppo_phase() {  # issue 43: stage 1 and stage 4, PPO_STEPS steps each, on GPU 0 (benchmarks/training/ppo_one_gpu.sh)
  : >"$OUT/ppo.log"
  ppo_setup "$OUT/ppo.log" || return
  [ -n "${PPO_STAGES-1 4}" ] || { stamp "ppo: staged only"; return; }
  [ -f "$PPO_WORK/model/config.json" ] || { echo "ppo: no model yet (GGUF parts missing)"; return; }
  stamp "ppo: stages ${PPO_STAGES-1 4}"
  MODEL_PATH="$PPO_WORK/model" OUT="$OUT/ppo" STAGES="${PPO_STAGES-1 4}" STEPS="${PPO_STEPS:-2}" \
    bash benchmarks/training/ppo_one_gpu.sh 2>&1 | tee -a "$OUT/ppo.log" | grep -E '^\[ppo_one_gpu|ok |FAIL|rc='
  # at most 8 files come back from $OUT: the stage folder as one archive
  tar -czf "$OUT/ppo_stages${PPO_STAGES// /}.tgz" -C "$OUT" ppo && rm -rf "$OUT/ppo"
  stamp "ppo done"
}
stop_leftovers() {  # what a run cut by its timeout left: Ray's daemons and workers start their own sessions
  pkill -9 -f 'raylet|gcs_server|ray::|default_worker.py|dashboard/agent.py|log_monitor.py|cuda_agent.cli.main pool serve' 2>/dev/null
  sleep 2
}
pipeline_phase() {  # issue 44: recipe/cuda_agent/run_pipeline_one_gpu.sh on GPU 0, resumed over warm calls
  local work=/tmp/cuda_agent_pipeline runs=${PIPELINE_RUNS:-1}
  : >"$OUT/pipeline_setup.log"
  ppo_setup "$OUT/pipeline_setup.log" || return
  stop_leftovers
  local stages=${PIPELINE_STAGES:-}
  if [ ! -f "$PPO_WORK/model/config.json" ]; then
    stamp "pipeline: no model yet (GGUF parts missing): the baselines stage only"; stages=baselines
  fi
  for run in $(seq "$runs"); do
    stamp "pipeline: run $run of $runs${stages:+ (STAGES=$stages)}, at most ${PIPELINE_TIMEOUT:-540} s"
    local knobs="" name
    for name in PPO_STEPS RFT_STEPS VALUE_STEPS COLLECT_SAMPLES RESPONSE_1 RESPONSE_4 MAX_TURNS_4 ATTENTION; do
      [ -n "${!name:-}" ] && knobs+="$name=${!name} "
    done
    local cmd="${knobs}BASE_MODEL=$PPO_WORK/model WORK_DIR=$work bash recipe/cuda_agent/run_pipeline_one_gpu.sh"
    echo "\$ ${stages:+STAGES=\"$stages\" }$cmd" >>"$OUT/pipeline.log"
    # run from the work folder, as a user's installed copy would: in the checkout, its cuda_agent/ folder (the CLI
    # alone) hides the namespace that gpu-env.sh links (the first run failed on it: no module cuda_agent.sandbox_pool)
    mkdir -p "$work"
    (cd "$work" && STAGES="${stages:-baselines stage1 merge collect demonstrate filter rft value stage4}" \
      BASE_MODEL="$PPO_WORK/model" WORK_DIR="$work" timeout -k 20 "${PIPELINE_TIMEOUT:-540}" \
      bash "$REPO/recipe/cuda_agent/run_pipeline_one_gpu.sh") >>"$OUT/pipeline.log" 2>&1
    echo "rc=$?" >>"$OUT/pipeline.log"
    stop_leftovers
  done
  grep -E '^\[(pipeline|one_gpu)|^rc=|^\$' "$OUT/pipeline.log"
  # at most 8 files come back from $OUT: the stage logs and the small outputs as one archive
  (cd "$work" && tar -czf "$OUT/pipeline_work.tgz" --ignore-failed-read logs baselines ./*.jsonl ./*.yaml sft.parquet \
    critic/value_pretrain.json trajectories 2>/dev/null)
  (cd "$work" && find . -maxdepth 3 -not -path './cache*' -not -path './trajectories/*' | sort) >"$OUT/pipeline_files.txt"
  stamp "pipeline done"
}
if has hfengine; then hfengine_phase; fi
if has ppo; then ppo_phase; fi
if has pipeline; then pipeline_phase; fi
if has train; then train_phase; fi
if has timeline; then timeline_phase; fi
if has agentpath; then agentpath_phase; fi
if has kernelbench; then kernelbench_phase; fi
if has kbbaselines; then kbbaselines_phase; fi
if has pool1; then pool_phase 1 ""; fi
if has pool1p; then pool_phase 1 _process --worker-processes yes; fi
if has pool2 && [ "$GPUS" -ge 2 ]; then pool_phase 2 ""; fi
if has pool2in && [ "$GPUS" -ge 2 ]; then pool_phase 2 _in_process --worker-processes no; fi
if has poolsweep; then pool_sweep "$LAST" ""; fi
if has pool16; then
  stamp "pool16"
  for depth in 4 8; do
    timeout 90 python3 -P benchmarks/pool/bench_pool.py --device cuda --devices "$LAST" --pipeline-depth $depth \
      --submitters 16 --jobs $(( depth == 4 ? 48 : 32 )) --out "$OUT/pool16_depth$depth.json" >>"$OUT/pool16.log" 2>&1
    echo "depth$depth rc=$?" >>"$OUT/pool16.log"
  done
  stamp "pool16 done"; grep -E '^\[bench_pool\]|rc=' "$OUT/pool16.log"
fi
if has poolmix; then
  stamp "poolmix"
  for depth in ${POOLMIX_DEPTHS:-4 8}; do
    timeout 150 python3 -P benchmarks/pool/bench_pool.py --device cuda --devices "$LAST" --pipeline-depth $depth \
      --submitters 16 --jobs $(( depth == 4 ? 48 : 32 )) --mix softmax_big --out "$OUT/poolmix_depth$depth.json" \
      >>"$OUT/poolmix.log" 2>&1
    echo "depth$depth rc=$?" >>"$OUT/poolmix.log"
  done
  stamp "poolmix done"; grep -E '^\[bench_pool\]|rc=' "$OUT/poolmix.log"
fi
if has poolstack; then
  stamp "poolstack"
  timeout 90 python3 -P benchmarks/pool/bench_pool.py --device cuda --devices "$LAST" --submitters 16 --jobs 48 \
    --out "$OUT/poolstack.json" --stack-samples "$OUT/poolstack_stacks.json" >"$OUT/poolstack.log" 2>&1
  echo "poolstack rc=$?" >>"$OUT/poolstack.log"; stamp "poolstack done"; grep -E '^\[bench_pool\]|rc=' "$OUT/poolstack.log"
fi
if has poolsweep2 && [ "$GPUS" -ge 2 ]; then pool_sweep 0,1 _2gpu; fi
stamp "end"
exit "$status"
