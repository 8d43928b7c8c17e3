"""A CPU child keeps the memory it frees, so a new allocation gets the poison the harness left there.

The harness fills a block the size of the outputs with NaN and frees it before each call (`Child.poison`): an
output the candidate leaves partly unwritten then shows NaN where it wrote nothing. glibc hands blocks over
32 MB out as fresh pages of the operating system (mmap; the largest threshold it accepts) and returns a freed
heap top to it: such an output read zero wherever it was not written, and a relu kernel that wrote only its
positive elements passed on a 64 MB output (2026-12-04). With mmap off and no trimming, freed blocks stay in
the heap and the next allocation reuses them. Every CPU child (baselines too) runs this way, so eager and
candidate pay the same for their memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Turn glibc's mmap allocations and heap trimming off for this process; False where that is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
