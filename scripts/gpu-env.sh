# Sourced by the GPU scripts: the cuda_agent namespace as links (setup.py's mapping) and the small
# wheels carried in .whl/ (pydantic & co, see README "GPU tests"), for a GPU node without a registry.
SITE=/tmp/cuda_agent_site
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 1
fi
NS=/tmp/cuda_agent_ns/cuda_agent; REPO="$(pwd)"; rm -rf /tmp/cuda_agent_ns; mkdir -p "$NS"
for f in cuda_agent/*; do ln -s "$REPO/$f" "$NS/$(basename "$f")"; done
for d in sandbox_pool tools reward_fns data_gen evaluation service; do ln -s "$REPO/$d" "$NS/$d"; done
ln -s "$REPO/recipe/cuda_agent" "$NS/recipe"
export PYTHONPATH="/tmp/cuda_agent_ns:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cuda_agent() { python3 -P -m cuda_agent.cli.main "$@"; }
# The node's python packages (its torch included) were installed without bytecode, and it sets
# PYTHONDONTWRITEBYTECODE: every fresh process compiled each module it imports from source (`import torch`
# 3-4.6 s there). Compile them once, as `pip install` does by default; later sessions' calls only stat the files.
# CUDA_AGENT_NO_PRECOMPILE=1 leaves the node as it is (benchmarks/harness/diag_bytecode.sh measures both).
# Bounded (-r: no walk down a link loop; timeout: never holds a session up), half the cores. On the H100 node
# of 2026-12-05: `import torch` 4.3 s -> 1.9 s, for 10 s once; a later call of the same node walks only the
# carried wheels and the repo (the whole site-packages walk costs 7 s even when all is up to date).
if [ -z "${CUDA_AGENT_NO_PRECOMPILE:-}" ]; then
  PRECOMPILED=/tmp/cuda_agent_precompiled; targets=("$SITE" "$REPO")
  [ -f "$PRECOMPILED" ] || targets+=("$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')")
  timeout 300 python3 -m compileall -q -r 12 -j "$(( ($(nproc) + 1) / 2 ))" "${targets[@]}" >/dev/null 2>&1; rc=$?
  # rc 1: some files do not compile (harmless: those import from source); 124: the bound, walk again next time.
  [ "$rc" = 124 ] && echo "gpu-env: compileall stopped at its 300 s bound" >&2 || touch "$PRECOMPILED"
fi
# No bubblewrap on the GPU node: Debian's, carried in .whl/bwrap/ (binary + its three libraries, README "GPU
# tests"), so candidate compiles run in the compiler jail there too (harness/compiler/jail.py).
if ! command -v bwrap >/dev/null && [ -x .whl/bwrap/bwrap.real ]; then
  mkdir -p /tmp/cuda_agent_bin
  printf '#!/bin/sh\nexec /lib64/ld-linux-x86-64.so.2 --library-path "%s" "%s" "$@"\n' "$REPO/.whl/bwrap" "$REPO/.whl/bwrap/bwrap.real" >/tmp/cuda_agent_bin/bwrap
  chmod +x /tmp/cuda_agent_bin/bwrap; export PATH="/tmp/cuda_agent_bin:$PATH"
fi
