"""The workspace layout (compatible with the official CUDA-Agent ``agent_workdir``).

::

    SKILL.md              the skill                                   read-only
    model.py              reference Model, get_inputs, get_init_inputs read-only
    model_new.py          ModelNew, calls cuda_extension              agent writes
    kernels/              the agent's kernels and bindings            agent writes
    binding.cpp           defines module cuda_extension               read-only
    binding_registry.h    REGISTER_BINDING                            read-only
    utils/                compile.sh, compile.py, verification.py, profiling.py   read-only
    .cuda_agent.json      workspace manifest (device)                 read-only
"""

from __future__ import annotations

import re

MANIFEST = ".cuda_agent.json"
PROTECTED_PATHS: tuple[str, ...] = (
    "SKILL.md",
    "model.py",
    "binding.cpp",
    "binding_registry.h",
    "utils",
    MANIFEST,
)
"""Files and folders the agent can read and run but never change."""

CANDIDATE_ENTRY = "model_new.py"
KERNEL_DIR = "kernels"
KERNEL_SUFFIXES: tuple[str, ...] = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
MAX_CANDIDATE_FILE_BYTES = 512 * 1024
MAX_CANDIDATE_FILES = 64

_KERNEL_PATH = re.compile(r"^kernels/[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def is_candidate_path(path: str) -> bool:
    """True for the paths a candidate may submit: model_new.py and kernels/<file>."""
    if path == CANDIDATE_ENTRY:
        return True
    return bool(_KERNEL_PATH.match(path)) and path.endswith(KERNEL_SUFFIXES) and ".." not in path


def is_protected(path: str) -> bool:
    """True if `path` (relative, '/'-separated) is or lies under a protected path."""
    clean = path.strip("/")
    return any(clean == p or clean.startswith(p + "/") for p in PROTECTED_PATHS)
