#!/usr/bin/env bash
# Run the CPU test suite (GPU tests are skipped; scripts/gpu-tests.sh runs them on a GPU node).
# Starts the Docker engine for the docker-marked tests when run as root.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null; then
  bash docker/start_engine.sh || echo "test.sh: docker engine not started; docker tests will be skipped" >&2
fi
exec .venv/bin/python -m pytest -m "not gpu" -q "$@"
