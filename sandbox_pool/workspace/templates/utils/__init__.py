"""Fixed infrastructure (read-only): thin entry points of the CUDA skill's scripts."""
