"""Create the CUDA driver's primary context in a thread while this process still imports torch.

A fresh process's first CUDA use costs `cuInit` and the primary context's creation (hundreds of ms
on an H200) after the seconds of `import torch`; both are driver calls that need no torch and
release the GIL (ctypes). Made here first, the context is the one the CUDA runtime (torch) later
retains: its first use finds it ready. Only for a process that never forks without exec afterwards
(the one-shot `cuda-agent eval`: its candidates come from a forkserver launched before).
Any failure is silent: torch's own initialisation reports it.
"""

from __future__ import annotations

import ctypes
import threading
import time


class CudaPrimer(threading.Thread):
    """The priming thread; `took_s` is how long the driver calls took (None until done or on failure)."""

    def __init__(self, device_index: int) -> None:
        super().__init__(name="cuda-primer", daemon=True)
        self.device_index = device_index
        self.took_s: float | None = None
        self.error: str | None = None

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            driver = ctypes.CDLL("libcuda.so.1")
            device, context = ctypes.c_int(), ctypes.c_void_p()
            for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(device), self.device_index)),
                               ("cuDevicePrimaryCtxRetain", (ctypes.byref(context), device))):
                code = getattr(driver, call)(*args)
                if code != 0:
                    self.error = f"{call} returned CUDA error {code}"
                    return
        except (OSError, AttributeError) as exc:  # no driver here: torch says so at its first CUDA use
            self.error = str(exc)
            return
        self.took_s = time.monotonic() - t0


def prime_cuda_context(device_index: int = 0) -> CudaPrimer:
    """Start priming `device_index` (an index among the visible devices, as torch counts them)."""
    primer = CudaPrimer(device_index)
    primer.start()
    return primer


__all__ = ["CudaPrimer", "prime_cuda_context"]
