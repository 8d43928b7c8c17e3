#!/usr/bin/env bash
# Where a fresh process's `import torch` goes on the GPU node with and without bytecode: the node's packages
# come without __pycache__ and it sets PYTHONDONTWRITEBYTECODE, so scripts/gpu-env.sh compiles them once.
# Run on a fresh node before anything else sourced gpu-env.sh: OUT=dir bash benchmarks/harness/diag_bytecode.sh
set -u; D="$OUT/diag_bytecode"; mkdir -p "$D"
CUDA_AGENT_NO_PRECOMPILE=1 source scripts/gpu-env.sh
PL=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
{ env | grep -i '^python' | sort
  python3 -c "import sys; print('dont_write_bytecode', sys.flags.dont_write_bytecode, 'pycache_prefix', sys.pycache_prefix)"
  echo "purelib $PL: $(find "$PL" -name '*.py' | wc -l) .py, $(find "$PL" -name '*.pyc' | wc -l) .pyc"
  for i in 1 2 3; do /usr/bin/time -f "import torch, no bytecode: %e s (user %U sys %S)" python3 -c "import torch"; done
  for i in 1 2; do /usr/bin/time -f "cuda-agent --help, no bytecode: %e s" python3 -P -m cuda_agent.cli.main --help >/dev/null; done
  /usr/bin/time -f "compileall (purelib, carried wheels, repo; -j 8): %e s" python3 -m compileall -q -r 12 -j 8 "$PL" "$SITE" "$(pwd)" >/dev/null
  /usr/bin/time -f "compileall again (all up to date): %e s" python3 -m compileall -q -r 12 -j 8 "$PL" "$SITE" "$(pwd)" >/dev/null
  for i in 1 2 3; do /usr/bin/time -f "import torch, bytecode: %e s (user %U sys %S)" python3 -c "import torch"; done
  for i in 1 2; do /usr/bin/time -f "cuda-agent --help, bytecode: %e s" python3 -P -m cuda_agent.cli.main --help >/dev/null; done
} > "$D/diag.txt" 2>&1
cat "$D/diag.txt"
