#!/usr/bin/env bash
# Compile kernels/ into the module cuda_extension. Fixed infrastructure: do not edit.
cd "$(dirname "$0")/.." && exec python3 -m utils.compile "$@"
