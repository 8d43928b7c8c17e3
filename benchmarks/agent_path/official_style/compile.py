"""Forced rebuild of *.cu / *.cpp (root and kernels/) into ./cuda_extension.so, no cache."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from official_style.common import device


def main() -> int:
    import torch.utils.cpp_extension as cpp_ext

    sources = sorted({str(p) for d in (Path("."), Path("kernels")) for ext in ("*.cu", "*.cpp") for p in d.glob(ext)})
    build = Path("build/forced_compile")
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    Path("cuda_extension.so").unlink(missing_ok=True)
    try:
        cpp_ext.load(name="cuda_extension", sources=sources, build_directory=str(build), verbose=False,
                     with_cuda=device() == "cuda", extra_cflags=["-O3", "-std=c++17"],
                     extra_cuda_cflags=["-O3", "--use_fast_math"])
    except Exception as exc:  # noqa: BLE001 - the official script prints and fails the same way
        print(f"Compilation failed.\n{exc}"[:2000])
        return 1
    shutil.copy2(build / "cuda_extension.so", "cuda_extension.so")
    print("Compile success: cuda_extension.so")
    return 0


if __name__ == "__main__":
    sys.exit(main())
