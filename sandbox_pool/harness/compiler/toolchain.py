"""Detect the compilers, torch headers and flags used to build candidates.

Everything that changes the produced binary goes into `Toolchain.fingerprint`, the
prefix of every compile-cache key.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cuda_agent.errors import InfraError

CXX_STD = "-std=c++20"


class Toolchain(BaseModel):
    """Compilers and flags for one device."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: str
    cxx: str
    nvcc: str | None
    cuda_home: str | None
    cuda_arch: str | None
    include_dirs: tuple[str, ...]
    library_dirs: tuple[str, ...]
    defines: tuple[str, ...]
    torch_version: str
    description: str
    fingerprint: str


def _version_line(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    return lines[-1] if "nvcc" in exe else (lines[0] if lines else exe)


def _cuda_home() -> str | None:
    """The CUDA toolkit root: the first candidate with bin/nvcc and the runtime headers."""
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates += ["/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for candidate in candidates:
        if candidate and Path(candidate, "bin", "nvcc").exists() and Path(candidate, "include", "cuda_runtime_api.h").exists():
            return candidate
    return None


def _cuda_arch() -> str:
    override = os.environ.get("CUDA_AGENT_CUDA_ARCH")
    if override:
        return override
    import torch

    if not torch.cuda.is_available():
        raise InfraError("device 'cuda' requested but torch sees no GPU; use --device cpu or run on a GPU node")
    major, minor = torch.cuda.get_device_capability()
    suffix = "a" if (major, minor) in ((9, 0), (10, 0)) else ""
    return f"{major}{minor}{suffix}"


def _pybind_abi_defines() -> tuple[str, ...]:
    import torch.utils.cpp_extension as cpp_ext

    getter = getattr(cpp_ext, "_get_pybind11_abi_build_flags", None)
    flags = tuple(getter()) if getter else ()
    abi = int(getattr(__import__("torch")._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    return (*flags, f"-D_GLIBCXX_USE_CXX11_ABI={abi}")


def _nvidia_wheel_dirs(kind: str) -> list[str]:
    """include/ or lib/ folders of pip-installed nvidia-* packages (cublas, cudnn, ...)."""
    found: list[str] = []
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        root = Path(site) / "nvidia"
        if root.is_dir():
            found += sorted(str(p) for p in root.glob(f"*/{kind}") if p.is_dir())
    return found


@functools.lru_cache(maxsize=4)
def detect_toolchain(device: str) -> Toolchain:
    """The toolchain for `device` ('cpu' or 'cuda'). Raises InfraError if unusable."""
    import torch
    import torch.utils.cpp_extension as cpp_ext

    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise InfraError("no C++ compiler found: install g++ (apt-get install g++)")
    torch_lib = str(Path(torch.__file__).parent / "lib")
    include_dirs = [*cpp_ext.include_paths(), sysconfig.get_paths()["include"]]
    library_dirs = [torch_lib]
    nvcc = cuda_home = arch = None
    if device == "cuda":
        cuda_home = _cuda_home()
        if cuda_home is None:
            raise InfraError("nvcc not found: set CUDA_HOME or put nvcc on PATH")
        nvcc = str(Path(cuda_home) / "bin" / "nvcc")
        arch = _cuda_arch()
        include_dirs += [str(Path(cuda_home) / "include"), *_nvidia_wheel_dirs("include")]
        library_dirs += [str(Path(cuda_home) / "lib64"), *_nvidia_wheel_dirs("lib")]
    defines = (*_pybind_abi_defines(), "-DTORCH_EXTENSION_NAME=cuda_extension")
    parts = [device, _version_line(cxx), torch.__version__, sysconfig.get_python_version(), *defines]
    if nvcc:
        parts += [_version_line(nvcc), arch or ""]
    description = " | ".join(parts[1:3] + ([parts[-2], f"sm_{arch}"] if nvcc else []))
    fingerprint = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return Toolchain(
        device=device,
        cxx=cxx,
        nvcc=nvcc,
        cuda_home=cuda_home,
        cuda_arch=arch,
        include_dirs=tuple(include_dirs),
        library_dirs=tuple(library_dirs),
        defines=defines,
        torch_version=torch.__version__,
        description=description,
        fingerprint=fingerprint,
    )
