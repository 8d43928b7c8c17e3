#!/usr/bin/env bash
# Run the GPU tests and the harness benchmark on a GPU node (e.g. the H200 device machine).
# Needs: python3 with torch (CUDA), nvcc, g++, pytest, typer, rich, numpy, filelock.
# Missing small wheels (pydantic & co) are installed from .whl/ if present (see README).
set -uo pipefail
OUT="${OUT:-$(mktemp -d)}"
source scripts/gpu-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -P -m pytest -p no:cacheprovider -m gpu -v -s tests/sandbox_pool/harness/test_gpu.py 2>&1 | tee "$OUT/gpu-tests.log"
status=${PIPESTATUS[0]}
python3 -P benchmarks/harness/bench_eval.py --device cuda --repeats 3 --out "$OUT/bench_eval.json" 2>&1 | tee "$OUT/bench.log"
if [ "${WITH_OFFICIAL_BASELINE:-0}" = 1 ]; then
  python3 -P benchmarks/harness/bench_official_style.py --repeats 1 2>&1 | tee "$OUT/bench_official.log"
fi
exit $status
