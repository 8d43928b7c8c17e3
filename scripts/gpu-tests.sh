#!/usr/bin/env bash
# The GPU-marked tests and the evaluation benchmark on a GPU node (the "tests bench" phases of
# scripts/gpu-session.sh); WITH_OFFICIAL_BASELINE=1 adds the official-style baseline benchmark.
# Needs: python3 with torch (CUDA), nvcc, g++, pytest, typer, rich, numpy, filelock; pydantic & co
# from .whl/ if missing (see README "GPU tests").
set -uo pipefail
export OUT="${OUT:-$(mktemp -d)}"
PHASES="tests bench" bash scripts/gpu-session.sh
status=$?
if [ "${WITH_OFFICIAL_BASELINE:-0}" = 1 ]; then
  source scripts/gpu-env.sh
  python3 -P benchmarks/harness/bench_official_style.py --repeats 1 2>&1 | tee "$OUT/bench_official.log"
fi
exit $status
