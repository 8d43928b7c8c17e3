"""A sealed shared-memory region for a child's trial outputs (defence forged_messages: the parent trusts no byte count).

Moving a 128 MB output child -> file -> parent cost ~0.3 s per correctness trial on an H200
(a fresh host allocation, a write, a read, a pageable upload): most of an evaluation. Instead
the parent creates one memfd per evaluation, passes it to the child when it forks, and, once
the reference has given the outputs' size, grows it and seals it against shrinking and
growing (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before any candidate code exists. Both
map it; on a GPU both pin their mapping, so the child's download and the parent's upload are
DMA copies. A sealed size is what makes the parent's mapping safe: a region that could shrink
under it would kill the parent with SIGBUS.

The parent copies what it reads before judging it (a candidate's threads could still write).
An output that does not fit goes through the file as before (it is wrong anyway: the region
holds exactly the reference's outputs).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import warnings
from typing import Any

import torch

from cuda_agent.sandbox_pool.harness.protocol import region_memfd

logger = logging.getLogger(__name__)

ALIGN = 64
"""Every output starts at a multiple of this (a typed view of the bytes needs an aligned offset)."""
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL if hasattr(fcntl, "F_SEAL_SHRINK") else 0


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def region_bytes(outputs: list[Any]) -> int:
    """Size of a region that holds `outputs` (the reference's) at aligned offsets."""
    return sum(aligned(v.numel() * v.element_size()) for v in outputs if isinstance(v, torch.Tensor))


class SharedOutputs:
    """One mapping of the region (the parent's or the child's) as a uint8 tensor."""

    def __init__(self, fd: int, nbytes: int, pin: bool) -> None:
        self.nbytes = nbytes
        self._map: mmap.mmap | None = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.bytes: torch.Tensor | None = torch.frombuffer(self._map, dtype=torch.uint8)
        self.pinned = pin and _pin(self.bytes)

    # -- the child's side ---------------------------------------------------------------
    def write(self, outputs: list[Any]) -> list[dict[str, Any]] | None:
        """Copy the tensors of `outputs` into the region; their layout, or None if they do not fit."""
        assert self.bytes is not None
        if region_bytes(outputs) > self.nbytes:
            return None
        layout: list[dict[str, Any]] = []
        offset = 0
        for value in outputs:
            if not isinstance(value, torch.Tensor):
                layout.append({"value": value})
                continue
            flat = value.detach().contiguous().reshape(-1)
            raw = flat.view(torch.uint8) if flat.numel() else flat.new_empty(0, dtype=torch.uint8)
            self.bytes[offset:offset + raw.numel()].copy_(raw)
            layout.append({"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                           "offset": offset, "nbytes": raw.numel(), "shared": True})
            offset += aligned(raw.numel())
        return layout

    def close(self) -> None:
        if self.bytes is not None and self.pinned:
            _unpin(self.bytes)
        self.bytes = None  # the tensor holds an export of the mapping: drop it before closing the map
        if self._map is not None:
            with contextlib.suppress(BufferError):
                self._map.close()
            self._map = None


class OutputRegion:
    """The parent's side: creates the memfd (before the child forks), sizes and seals it, maps it."""

    def __init__(self, fd: int | None = None) -> None:
        """`fd`: a `protocol.region_memfd()` made earlier (a child already started with it), else a new one."""
        self.fd: int | None = fd if fd is not None else region_memfd()
        self.shared: SharedOutputs | None = None

    def seal(self, nbytes: int, pin: bool) -> int:
        """Give the region its final size and seal it; returns the size (0: no region, use files)."""
        if self.fd is None or nbytes <= 0 or not _SEALS:
            return 0
        try:
            os.ftruncate(self.fd, nbytes)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _SEALS)
            self.shared = SharedOutputs(self.fd, nbytes, pin)
        except (OSError, ValueError, RuntimeError) as exc:
            logger.warning("trial outputs go through files: the shared region failed (%s)", exc)
            return 0
        return nbytes

    def read(self, offset: int, nbytes: int) -> torch.Tensor:
        """A uint8 view of [offset, offset + nbytes); the caller has checked the range and copies it."""
        assert self.shared is not None and self.shared.bytes is not None
        return self.shared.bytes[offset:offset + nbytes]

    @property
    def nbytes(self) -> int:
        return self.shared.nbytes if self.shared is not None else 0

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()
            self.shared = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def attach(fd: int | None, nbytes: int, pin: bool) -> SharedOutputs | None:
    """The child's mapping of the region the parent sealed (None: no region, write files)."""
    if fd is None or nbytes <= 0:
        return None
    try:
        if os.fstat(fd).st_size != nbytes or fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS != _SEALS:
            return None
        return SharedOutputs(fd, nbytes, pin)
    except (OSError, ValueError, RuntimeError):
        return None


def _pin(tensor: torch.Tensor) -> bool:
    """Page-lock a host mapping so copies to and from the GPU are DMA (best effort)."""
    if not torch.cuda.is_available() or tensor.numel() == 0:
        return False
    try:
        torch.cuda.check_error(torch.cuda.cudart().cudaHostRegister(tensor.data_ptr(), tensor.numel(), 0))
        return True
    except Exception as exc:  # an old driver, a restricted container: the copies stay pageable
        logger.debug("cudaHostRegister failed: %s", exc)
        return False


def _unpin(tensor: torch.Tensor) -> None:
    with contextlib.suppress(Exception):
        torch.cuda.cudart().cudaHostUnregister(tensor.data_ptr())
