#!/usr/bin/env bash
# Copy the parts of a KernelBench checkout the GPU session's `kernelbench` phase needs into .kernelbench/
# (git-ignored, ~1.3 MB; name it in the device run's `carry`): levels 1-3 and the published timings (every GPU).
#   bash scripts/kernelbench_carry.sh ~/KernelBench      # a `git clone https://github.com/ScalingIntelligence/KernelBench`
set -euo pipefail
src="${1:?usage: bash scripts/kernelbench_carry.sh KERNELBENCH_CHECKOUT}"
cd "$(dirname "$0")/.."
[ -d "$src/KernelBench/level1" ] || { echo "kernelbench_carry: $src is not a KernelBench checkout (no KernelBench/level1)" >&2; exit 2; }
rm -rf .kernelbench && mkdir -p .kernelbench/KernelBench .kernelbench/results/timing
cp -r "$src"/KernelBench/level1 "$src"/KernelBench/level2 "$src"/KernelBench/level3 .kernelbench/KernelBench/
for timing in "$src"/results/timing/*/; do cp -r "$timing" .kernelbench/results/timing/; done  # one folder per GPU
cp "$src"/LICENSE .kernelbench/ 2>/dev/null || true
git -C "$src" rev-parse HEAD > .kernelbench/COMMIT 2>/dev/null || true
echo "kernelbench_carry: .kernelbench/ ready ($(du -sh .kernelbench | cut -f1))"
