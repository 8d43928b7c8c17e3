#!/usr/bin/env bash
# Pool throughput on a GPU node (issue 3's benchmark): 16 concurrent submitters on one GPU, then on two
# (a worker process per GPU, the default), then on two with both workers in one process (the control).
# Usage, from the repository root (e.g. on the nvidia-h200-x2 device machine, carrying .whl):
#   OUT=/some/dir POOL_JOBS=48 bash benchmarks/pool/run_gpu.sh
exec env PHASES="pool1 pool2 pool2in" bash scripts/gpu-session.sh
