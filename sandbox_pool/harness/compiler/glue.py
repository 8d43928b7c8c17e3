"""The fast glue: binding units compiled against light stand-ins of the torch headers first.

A binding unit (`kernels/*_binding.cpp`, or `kernels/*.cpp` on the CPU device) spends 10-15 s
of g++ in `<torch/types.h>` and `<torch/csrc/utils/pybind.h>`. The stand-ins in `fast_glue/`
declare the tensor class, the allowed creation operators and a pybind11-shaped `module::def`
that records functions for the fixed binding.cpp; with their own precompiled header a unit
builds in about two seconds (H200 machine, link included). Units that include anything
outside `FAST_INCLUDES`, or that the stand-ins cannot compile, are compiled with the real
headers (same object contract).
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

GLUE_DIR = Path(__file__).resolve().parent / "fast_glue"
STAGED_HEADERS = ("cuda_agent_fast_core.h", "cuda_agent_fast_host.h")
"""Staged next to binding.cpp (the fixed binding.cpp includes them by name)."""

FAST_INCLUDES = re.compile(
    r"""^(torch/types\.h|torch/csrc/utils/pybind\.h|(\.\./)?binding_registry\.h|
    c10/.*|ATen/core/Tensor\.h|ATen/Dispatch\.h|ATen/cuda/CUDAContext\.h|
    cuda\.h|cuda_runtime(_api)?\.h|cuda_fp16\.h|cuda_bf16\.h|cublas(_v2|Lt)?\.h|cudnn\.h|omp\.h|
    [A-Za-z_0-9]+(\.(h|hpp|cuh))?)$""",
    re.VERBOSE,
)
"""Includes a fast-glue unit may have: the binding contract's, c10, CUDA libraries, standard
headers (`<vector>`, `<cmath>`, ...) and the candidate's own headers in kernels/."""

_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """Content hash of the glue (part of the compile cache keys)."""
    h = hashlib.sha256()
    for path in sorted(GLUE_DIR.rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(GLUE_DIR)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def eligible(path: str, source: str) -> bool:
    """Whether unit `path` is a candidate binding unit that may try the fast glue."""
    if not (path.startswith("kernels/") and path.endswith((".cpp", ".cc"))):
        return False
    includes = _INCLUDE.findall(source)
    if "torch/types.h" not in includes and "torch/csrc/utils/pybind.h" not in includes:
        return False
    return all(FAST_INCLUDES.match(inc) or inc.startswith(("kernels/", "./")) for inc in includes)


def flags(base: list[str]) -> list[str]:
    """The unit's flags with the stand-ins first on the include path."""
    return [f"-I{GLUE_DIR}", *base, f"-DCUDA_AGENT_FAST_GLUE={fingerprint()}"]


def pch_text(device: str) -> str:
    """The fast glue's precompiled header (the CUDA stream header too on the cuda device)."""
    headers = ["<torch/types.h>", "<cuda_agent_fast_glue.h>", "<functional>", "<string>", "<vector>"]
    if device == "cuda":
        headers += ["<c10/cuda/CUDAStream.h>", "<cuda_runtime.h>"]
    return "#pragma once\n" + "".join(f"#include {h}\n" for h in headers)


@functools.lru_cache(maxsize=1)
def fixed_binding_cpp() -> str:
    return (GLUE_DIR / "binding.cpp").read_text()


@functools.lru_cache(maxsize=1)
def staged_headers() -> dict[str, str]:
    """Read once per process (every build stages them); callers copy, never mutate."""
    return {name: (GLUE_DIR / name).read_text() for name in STAGED_HEADERS}
