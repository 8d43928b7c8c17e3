"""Detect the compilers, torch headers and flags used to build candidates.

Everything that changes the produced binary goes into `Toolchain.fingerprint`, the
prefix of every compile-cache key. Detecting imports torch (~2.7 s) and, on cuda,
initialises CUDA; with a cache folder the result is kept as a record keyed on facts
read without torch (file stamps, environment, NVML), so a later process compiles at once.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import importlib.util
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from cuda_agent.errors import InfraError

logger = logging.getLogger(__name__)

CXX_STD = "-std=c++20"
RECORD_FORMAT = 1  # bump when the record key's facts or the Toolchain fields change
_KEY_ENV = ("CXX", "CUDA_HOME", "CUDA_PATH", "CUDA_AGENT_CUDA_ARCH", "CUDA_VISIBLE_DEVICES")


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


def _arch_name(major: int, minor: int) -> str:
    """nvcc's arch name; 9.0 and 10.0 get the "a" variant (wgmma, tcgen05 need it)."""
    return f"{major}{minor}{'a' if (major, minor) in ((9, 0), (10, 0)) else ''}"


def _cuda_arch() -> str:
    override = os.environ.get("CUDA_AGENT_CUDA_ARCH")
    if override:
        return override
    import torch

    if not torch.cuda.is_available():
        raise InfraError("device 'cuda' requested but torch sees no GPU; use --device cpu or run on a GPU node")
    return _arch_name(*torch.cuda.get_device_capability())


def nvml_cuda_arch() -> str | None:
    """The GPUs' arch read through NVML (no torch, no CUDA context); None unless every GPU has the same
    one (which GPU torch uses depends on CUDA_VISIBLE_DEVICES) or when none is visible or NVML fails."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.strip().startswith("-")):
        return None
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
    except (OSError, AttributeError):
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value == 0:
            return None
        caps = set()
        for index in range(count.value):
            handle, major, minor = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            if (nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) != 0
                    or nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) != 0):
                return None
            caps.add((major.value, minor.value))
        return _arch_name(*caps.pop()) if len(caps) == 1 else None
    except AttributeError:
        return None
    finally:
        nvml.nvmlShutdown()


def _pybind_abi_defines() -> tuple[str, ...]:
    import torch.utils.cpp_extension as cpp_ext

    getter = getattr(cpp_ext, "_get_pybind11_abi_build_flags", None)
    flags = tuple(getter()) if getter else ()
    abi = int(getattr(__import__("torch")._C, "_GLIBCXX_USE_CXX11_ABI", 1))
    return (*flags, f"-D_GLIBCXX_USE_CXX11_ABI={abi}")


def _find_cxx() -> str | None:
    """$CXX, else g++, else c++: one choice for the record key and the detection."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")


def _stamp(path: str | Path | None) -> list[object] | None:
    """(real path, size, mtime) of a file: a reinstalled or replaced file changes it."""
    if not path:
        return None
    try:
        real = Path(path).resolve(strict=True)
        st = real.stat()
    except OSError:
        return None
    return [str(real), st.st_size, st.st_mtime_ns]


def _nvidia_wheel_dirs(kind: str) -> list[str]:
    """include/ or lib/ folders of pip-installed nvidia-* packages (cublas, cudnn, ...)."""
    found: list[str] = []
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        root = Path(site) / "nvidia"
        if root.is_dir():
            found += sorted(str(p) for p in root.glob(f"*/{kind}") if p.is_dir())
    return found


def record_key(device: str) -> tuple[str, str | None] | None:
    """(record key, torch-free GPU arch) from facts read without importing torch; None if one is unknown."""
    cxx = _find_cxx()
    torch_spec = importlib.util.find_spec("torch")
    if not cxx or torch_spec is None or not torch_spec.origin:
        return None
    arch = (os.environ.get("CUDA_AGENT_CUDA_ARCH") or nvml_cuda_arch()) if device == "cuda" else None
    if device == "cuda" and not arch:
        return None
    torch_dir = Path(torch_spec.origin).parent
    try:
        torch_version = hashlib.sha256((torch_dir / "version.py").read_bytes()).hexdigest()
    except OSError:
        return None
    cuda_home = _cuda_home()
    facts = {
        "format": RECORD_FORMAT, "device": device, "arch": arch,
        "cxx": [cxx, shutil.which(cxx), _stamp(shutil.which(cxx))],
        "cuda_home": cuda_home, "nvcc": _stamp(Path(cuda_home, "bin", "nvcc") if cuda_home else None),
        "torch": [str(torch_dir), torch_version, [_stamp(p) for p in sorted(glob.glob(str(torch_dir / "_C*.so")))]],
        "python": [sys.version, sysconfig.get_paths()["include"]],
        "nvidia_wheels": [_nvidia_wheel_dirs("include"), _nvidia_wheel_dirs("lib")],
        "env": {name: os.environ.get(name) for name in _KEY_ENV},
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24], arch


@functools.lru_cache(maxsize=8)
def detect_toolchain(device: str, cache_dir: Path | None = None) -> Toolchain:
    """The toolchain for `device` ('cpu' or 'cuda'). Raises InfraError if unusable.

    With `cache_dir` it is served from `<cache_dir>/toolchain/<record_key>.json` without importing
    torch, or detected and stored there."""
    if cache_dir is None or (keyed := record_key(device)) is None:
        return _detect(device)
    key, arch = keyed
    record = Path(cache_dir, "toolchain", f"{key}.json")
    try:
        return Toolchain.model_validate_json(record.read_bytes())
    except (OSError, ValueError):  # absent, unreadable or corrupt: detect again
        pass
    tc = _detect(device)
    if tc.cuda_arch != arch:
        logger.warning("NVML reports arch %s but torch uses %s: toolchain record not stored", arch, tc.cuda_arch)
        return tc
    tmp = record.with_suffix(f".{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:  # atomic: a concurrent reader sees the whole record or none
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(tc.model_dump_json())
        tmp.replace(record)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        logger.warning("toolchain record not stored: %s", exc)
    return tc


def _detect(device: str) -> Toolchain:
    """Detect with torch (its headers, ABI flags, version and, on cuda, the GPU's arch)."""
    import torch
    import torch.utils.cpp_extension as cpp_ext

    cxx = _find_cxx()
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
