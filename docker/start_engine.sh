#!/usr/bin/env bash
# Start a local Docker engine if none answers, and wait until it does (tests, CI, benchmarks).
#
# Needs root and Debian's docker.io (dockerd, containerd, runc). Idempotent: does nothing
# when `docker info` already works. The engine's log goes to ${DOCKERD_LOG:-/tmp/dockerd.log}.
# Usage: docker/start_engine.sh [TIMEOUT_S]        (default 60)
set -euo pipefail

timeout_s="${1:-60}"
sock="/var/run/docker.sock"

if docker info >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "start_engine.sh: no Docker engine answers and starting one needs root" >&2
    exit 1
fi
command -v dockerd >/dev/null || { echo "start_engine.sh: dockerd not installed (apt-get install docker.io)" >&2; exit 1; }

nohup dockerd --host "unix://$sock" >"${DOCKERD_LOG:-/tmp/dockerd.log}" 2>&1 &
for _ in $(seq "$((timeout_s * 10))"); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 0.1
done
echo "start_engine.sh: dockerd did not answer within ${timeout_s} s; see ${DOCKERD_LOG:-/tmp/dockerd.log}" >&2
exit 1
