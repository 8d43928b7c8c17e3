#!/usr/bin/env bash
# Pool throughput on a GPU node (issue 3's benchmark): 16 concurrent submitters on one GPU, then on two.
# Usage, from the repository root (e.g. on the nvidia-h200-x2 device machine, carrying .whl):
#   OUT=/some/dir JOBS=96 bash benchmarks/pool/run_gpu.sh
# Environment setup mirrors scripts/gpu-tests.sh (the cuda_agent namespace as links, wheels from .whl/).
set -uo pipefail
OUT="${OUT:-$(mktemp -d)}"; JOBS="${JOBS:-96}"; SUBMITTERS="${SUBMITTERS:-16}"
SITE=/tmp/cuda_agent_site
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
fi
NS=/tmp/cuda_agent_ns/cuda_agent; REPO="$(pwd)"; rm -rf /tmp/cuda_agent_ns; mkdir -p "$NS"
for f in cuda_agent/*; do ln -s "$REPO/$f" "$NS/$(basename "$f")"; done
for d in sandbox_pool tools reward_fns data_gen; do ln -s "$REPO/$d" "$NS/$d"; done
ln -s "$REPO/recipe/cuda_agent" "$NS/recipe"
export PYTHONPATH="/tmp/cuda_agent_ns:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
GPUS=$(nvidia-smi -L | wc -l)
python3 -P benchmarks/pool/bench_pool.py --device cuda --devices 0 --submitters "$SUBMITTERS" --jobs "$JOBS" \
  --out "$OUT/pool_1gpu.json" 2>&1 | tee "$OUT/pool_1gpu.log"
status=${PIPESTATUS[0]}
if [ "$GPUS" -ge 2 ]; then
  python3 -P benchmarks/pool/bench_pool.py --device cuda --devices 0,1 --submitters "$SUBMITTERS" \
    --jobs $((2 * JOBS)) --out "$OUT/pool_2gpu.json" 2>&1 | tee "$OUT/pool_2gpu.log"
  status=$((status | PIPESTATUS[0]))
  python3 - "$OUT" <<'PY'
import json, sys
one, two = (json.load(open(f"{sys.argv[1]}/pool_{n}gpu.json")) for n in (1, 2))
print(f"2-GPU / 1-GPU throughput: {two['evaluations_per_min'] / one['evaluations_per_min']:.2f}x (target >= 1.8)")
PY
fi
exit $status
