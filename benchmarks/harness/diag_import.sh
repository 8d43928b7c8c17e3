#!/usr/bin/env bash
# One-off: where a fresh process's `import torch` goes on this machine (writes under $OUT/diag).
set -u; D="$OUT/diag"; mkdir -p "$D"; source scripts/gpu-env.sh
{ python3 -c "import sys;print(sys.version)"; nproc; cat /proc/loadavg
  python3 -c "import torch,os;d=os.path.dirname(torch.__file__);c=d+'/__pycache__';print(d, 'writable', os.access(d,os.W_OK), 'pycache', os.path.isdir(c) and len(os.listdir(c)))"
  df -hT "$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')"
  for i in 1 2 3; do /usr/bin/time -f "plain %e s (user %U sys %S)" python3 -c "import torch"; done
  for i in 1 2 3; do PYTHONPYCACHEPREFIX=/tmp/pyc /usr/bin/time -f "pycacheprefix %e s (user %U sys %S)" python3 -c "import torch"; done
  for i in 1 2; do /usr/bin/time -f "two at once %e s" python3 -c "import torch" & /usr/bin/time -f "two at once %e s" python3 -c "import torch"; wait; done
  /usr/bin/time -f "python -c pass %e s" python3 -c pass
  /usr/bin/time -f "cli --help %e s" python3 -P -m cuda_agent.cli.main --help >/dev/null
  which bwrap; bwrap --version
} > "$D/diag.txt" 2>&1
python3 -X importtime -c "import torch" 2> "$D/importtime_torch.txt"
python3 -X importtime -P -c "import cuda_agent.cli.main" 2> "$D/importtime_cli.txt"
for f in torch cli; do sort -t'|' -k2 -n -r "$D/importtime_$f.txt" | head -40 > "$D/top_$f.txt"; done
